"""Structured outputs: grammar backends (xgrammar), per-request matchers, batched vocab masks.

See README.md in this folder for the scheduler / sampler / TokenizerManager API.
"""

from radixlm.constrained.base import (
    ANY_JSON, GRAMMAR_KINDS, GrammarBackend, GrammarError, GrammarKey, GrammarObject,
    create_grammar_backend, get_grammar_backend_class, register_grammar_backend,
)
from radixlm.constrained.grammar_request import (
    grammar_key, response_format_to_json_schema, validate_grammar_request, validate_sampling_params_grammar,
)
from radixlm.constrained.vocab_mask import (
    allocate_vocab_mask, apply_vocab_mask, bitmask_to_bool_mask, build_batch_vocab_mask, fill_batch_mask,
)

__all__ = [
    "ANY_JSON", "GRAMMAR_KINDS", "GrammarBackend", "GrammarError", "GrammarKey", "GrammarObject",
    "allocate_vocab_mask", "apply_vocab_mask", "bitmask_to_bool_mask", "build_batch_vocab_mask",
    "create_grammar_backend", "fill_batch_mask", "get_grammar_backend_class", "grammar_key",
    "register_grammar_backend", "response_format_to_json_schema", "validate_grammar_request",
    "validate_sampling_params_grammar",
]
