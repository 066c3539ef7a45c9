"""Reading checkpoints without loading weights: hub ids and the local cache, config/tokenizer files, tensor
names from headers."""
