"""Retrieval: document loaders, text cleaning and chunking, the embedder, the FAISS store and indexing."""
