"""Run by tests/nodes.py under each of two torchrun launchers (two "nodes" on one machine): join the process group
once, then run each drmix command given (separated by ``---``) in turn and print ``EXIT <i> RANK <r> CODE <c>``
for each; ``--sort-chunk N`` first sets ``encode_texts``' sort chunk (so that a tiny corpus splits over the ranks).

The group is joined here, not by the commands, so that several commands run in one launch: a process that
destroys its group cannot join again under torchrun's agent store."""
import faulthandler
import os
import sys

import torch.distributed as dist

# a process still running after this long prints every thread's stack (what a test that stops a hung launch shows)
faulthandler.dump_traceback_later(int(os.environ.get("DRMIX_TEST_STACKS_AFTER_S", "240")), exit=False)

args = sys.argv[1:]
if args[:1] == ["--sort-chunk"]:
    import drmix.retrieval.encode as encode

    encode._SORT_CHUNK = int(args[1])
    args = args[2:]
commands: list[list[str]] = [[]]
for arg in args:
    if arg == "---":
        commands.append([])
    else:
        commands[-1].append(arg)
dist.init_process_group("gloo")
from drmix.cli import main  # noqa: E402

for i, command in enumerate(commands):
    try:
        main(command)
        code = 0
    except SystemExit as e:
        code = e.code
    sys.stderr.flush()
    print(f"EXIT {i} RANK {os.environ['RANK']} CODE {code}", flush=True)
    dist.barrier()
faulthandler.cancel_dump_traceback_later()
dist.destroy_process_group()
