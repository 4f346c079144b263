"""tiermem's domain: settings, SQL record, extraction, embeddings, vectors and memory.

Nothing here imports FastAPI or Celery; services/ and workers/ are thin shells around it.
"""
