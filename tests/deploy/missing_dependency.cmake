# Run by CTest in place of a test whose interpreter or module is missing.
message(FATAL_ERROR "${MESSAGE}")
