"""Training-data augmentation: teacher-retriever mining of hard negatives and positives (``mine``), and the
DRAMA augmentations built on it (cropped-sentence queries, LLM-generated queries, LLM listwise reranking)."""
