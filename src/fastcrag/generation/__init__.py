"""Generation: chat-model adapters and loading, the chat and extractive reader generators, prompts, rewriting."""
