"""The testbed's own byte-level BPE tokenizer with a chat template.

Byte-level so that any string round-trips; digits are split into single tokens so
that arithmetic answers are predicted digit by digit (each digit a token that needs
computation). A small chat template (``<|user|>`` ... ``<|end|>``) gives the SFT
data the ``messages`` format that the HeRo training pipeline applies to real chat
backbones. The result is a ``PreTrainedTokenizerFast`` saved next to the backbone,
so ``AutoTokenizer.from_pretrained(backbone_dir)`` works offline.

No special token is added automatically when encoding (no BOS): pretraining rows are
windows cut anywhere in the token streams, and evaluation scores text exactly as
lm-eval's HF model does by default (``add_special_tokens=False``).
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

EOS = "<|endoftext|>"
PAD = "<|pad|>"
CHAT_TOKENS = ("<|system|>", "<|user|>", "<|assistant|>", "<|end|>")
SPECIAL_TOKENS = (EOS, PAD, *CHAT_TOKENS)

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\n' + message['content'] + '<|end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}"
)


def train_tokenizer(texts: Iterable[str], vocab_size: int) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE of ``vocab_size`` entries (specials included) on ``texts``."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=EOS,
        bos_token=EOS,
        pad_token=PAD,
        additional_special_tokens=list(CHAT_TOKENS),
        chat_template=CHAT_TEMPLATE,
        padding_side="right",
        model_max_length=1_000_000,
    )
