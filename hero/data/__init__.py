"""SFT data in the chat ``messages`` format: sources, chat-template tokenization, batches."""

from hero.data.sft import DataError, SFTDataset, collate, load_conversations, tokenize_conversation

__all__ = ["DataError", "SFTDataset", "collate", "load_conversations", "tokenize_conversation"]
