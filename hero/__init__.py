"""HeRo Lab: history-aware dynamic FFN routing on frozen LLMs."""
__version__ = "0.1.0"
