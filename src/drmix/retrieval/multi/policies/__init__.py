"""One module per allocation policy; each registers itself with
:func:`drmix.retrieval.multi.registry.register_policy` and is named in
:data:`drmix.retrieval.multi.registry.BUILTIN`, the list the registry imports on first use."""
