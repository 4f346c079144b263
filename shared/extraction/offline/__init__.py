"""The rule-based extractor used when no LLM is configured: phrase rules, no model call."""

from shared.extraction.offline.extractor import VERSION, OfflineExtractor, extract_items

__all__ = ["VERSION", "OfflineExtractor", "extract_items"]
