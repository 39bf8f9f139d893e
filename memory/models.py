# MemoryRecord and RecallEvent arrive with memory and recall (CONTRACT §10).
