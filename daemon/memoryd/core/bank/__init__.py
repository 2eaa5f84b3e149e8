"""The memory bank, the pure part (design §10): the files, their sections, the operations the cache
keeps, the router of free text and the optimiser."""
