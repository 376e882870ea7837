"""The ground floor: config declarations, token ids, the console, native stderr."""
