"""``python -m drmix.data.formats``: print the tables of training-data sources and layouts (docs/data.md)."""
from drmix.data.formats import layouts_table
from drmix.data.formats.sources import sources_table

print(sources_table())
print()
print(layouts_table())
