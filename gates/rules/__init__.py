"""Pure decisions and statistics: what the gates decide, over typed data. Nothing here starts a
process, reads a file or imports torch (tests/test_layers.py holds it to that)."""
