"""One module per allocation policy; each registers itself with
:func:`drmix.retrieval.multi.registry.register_policy` and is imported by
:func:`drmix.retrieval.multi.registry.load_policies` (every module here, no list to edit)."""
