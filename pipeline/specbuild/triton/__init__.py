"""The Triton model repository: parameters derived from the recipe, protobuf configs, our model.py sources."""
