"""OUTLETS: output-length prediction from a speculative-decoding (EAGLE-3) draft backbone."""
