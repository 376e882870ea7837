"""Decoding: greedy and beam search, sampling, BLEU/chrF scoring."""
