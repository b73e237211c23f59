"""The compat adapter turns a pre-rename gatherer into an MMEmbeddingGatherer."""

from __future__ import annotations

from support.typing_examples import PreRenameGatherer
from typing_extensions import assert_type

from rtmm_protocol import MMEmbeddingGatherer
from rtmm_protocol.compat import LegacyGathererAdapter, adapt_legacy_gatherer

adapted = adapt_legacy_gatherer(PreRenameGatherer())
assert_type(adapted, LegacyGathererAdapter)
gatherer: MMEmbeddingGatherer = adapted
