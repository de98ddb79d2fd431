"""File helpers shared by every module, one module per job (import from the module that does the job):

* :mod:`drmix.io.checks` -- whether an output can be written and where it lands: paths and symbolic links,
  permissions, room on disk (a full disk is one line), drmix's cache folder;
* :mod:`drmix.io.atomic` -- atomic writes: files renamed into place, several files replaced together, folders
  swapped in whole (and the leftovers of a killed swap recovered);
* :mod:`drmix.io.text` -- the one rule for text (lone surrogates become U+FFFD);
* :mod:`drmix.io.read` -- line-numbered JSONL, plain lines and YAML, errors naming file and line.

Content digests of files live in :mod:`drmix.fingerprint`.
"""
