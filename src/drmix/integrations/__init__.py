"""drmix's methods inside other libraries' training loops (``drmix.integrations.sentence_transformers``)."""
