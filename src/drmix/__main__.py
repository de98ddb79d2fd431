from drmix.cli import main

main()
