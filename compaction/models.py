# Summary and CompactionEvent arrive with the compaction engine (CONTRACT §8).
