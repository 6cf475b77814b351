"""Model loading: embedded model, GGUF conversion, model paths, configs, tokenizers, weights."""
