"""Decoding options: :class:`SearchOptions` for greedy and beam search, and the ``config.decode``
group of a training config (:class:`DecodeFields`, each field declared once with its default,
allowed values and comment), from which a run's search options are built."""

from __future__ import annotations

import dataclasses

import ml_collections

from deepnet_jax.common import config_schema
from deepnet_jax.common.config_schema import field
from deepnet_jax.common.tokens import BOS_ID, EOS_ID, PAD_ID

LENGTH_PENALTIES = ("fairseq", "gnmt")


@dataclasses.dataclass(frozen=True)
class SearchOptions:
    """Options of greedy and beam search (hashable: they are static under jit).

    Attributes:
      beam_size: K hypotheses kept per sentence (1 = greedy).
      length_penalty: α of the length penalty.
      length_penalty_form: "fairseq" (n^α) or "gnmt" (((5 + n)/6)^α).
      max_len_a, max_len_b: at most ⌊a·source_length + b⌋ generated tokens (EOS included).
      bos_id, eos_id: the decoder's start token and the end token.
      banned_ids: ids never generated (padding and BOS by default).
    """

    beam_size: int = 1
    length_penalty: float = 1.0
    length_penalty_form: str = "fairseq"
    max_len_a: float = 1.2
    max_len_b: int = 10
    bos_id: int = BOS_ID
    eos_id: int = EOS_ID
    banned_ids: tuple[int, ...] = (PAD_ID, BOS_ID)

    def validate(self, prefix: str = "") -> None:
        """One-line ValueError for the first invalid option; ``prefix`` names its config group
        (e.g. ``"decode."``)."""
        p = prefix
        if isinstance(self.beam_size, bool) or not isinstance(self.beam_size, int):
            raise ValueError(f"{p}beam_size={self.beam_size!r} must be an integer >= 1")
        if self.beam_size < 1:
            raise ValueError(f"{p}beam_size={self.beam_size!r} must be an integer >= 1")
        if self.length_penalty_form not in LENGTH_PENALTIES:
            raise ValueError(
                f"{p}length_penalty_form={self.length_penalty_form!r}; allowed values are "
                f"{LENGTH_PENALTIES}"
            )
        if not self.max_len_a >= 0:
            raise ValueError(f"{p}max_len_a={self.max_len_a!r} must be >= 0")
        b = self.max_len_b
        if isinstance(b, bool) or not isinstance(b, int) or b < 1:
            raise ValueError(f"{p}max_len_b={b!r} must be an integer >= 1")
        if self.eos_id in self.banned_ids:
            raise ValueError(f"{p}banned_ids={self.banned_ids} must not contain eos_id")


@dataclasses.dataclass(frozen=True)
class DecodeFields:
    """``config.decode``: the run's translation decoding (:mod:`deepnet_jax.decoding.search`)."""

    beam_size: int = field(
        5, "beam of the final evaluation (validation is greedy)", low=1, resumable=True
    )
    length_penalty: float = field(1.0, "α of the length penalty", resumable=True)
    length_penalty_form: str = field(
        "fairseq", "fairseq (n^α) or gnmt (((5 + n)/6)^α)", choices=LENGTH_PENALTIES, resumable=True
    )
    max_len_a: float = field(
        1.2, "at most ⌊a·source_length + b⌋ output tokens", low=0, resumable=True
    )
    max_len_b: int = field(10, "(see max_len_a)", low=1, resumable=True)
    batch_size: int = field(64, "sentences per decoding batch", low=1, resumable=True)
    eval_sentences: int = field(
        500, "validation sentences greedy-translated for BLEU; 0: no BLEU", low=0, resumable=True
    )
    num_samples: int = field(
        3, "sample translations printed (and kept in eval.json)", low=0, resumable=True
    )


def validate(decode: ml_collections.ConfigDict) -> None:
    """One-line error for the first ``decode.*`` value its declaration refuses."""
    config_schema.check_values(decode, DecodeFields, "decode.")
    search_options(config_schema.typed(DecodeFields, decode, "decode.")).validate("decode.")


def search_options(
    decode: DecodeFields,
    beam_size: int | None = None,
    length_penalty: float | None = None,
) -> SearchOptions:
    """A run's search options from its ``config.decode`` (``RunConfig.decode``), with
    ``beam_size`` / ``length_penalty`` overridden when given (not validated: callers validate
    with their own field prefix)."""
    return SearchOptions(
        beam_size=decode.beam_size if beam_size is None else beam_size,
        length_penalty=float(decode.length_penalty if length_penalty is None else length_penalty),
        length_penalty_form=decode.length_penalty_form,
        max_len_a=float(decode.max_len_a),
        max_len_b=decode.max_len_b,
    )
