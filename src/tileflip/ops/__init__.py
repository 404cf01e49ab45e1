"""The public ops: argument checks, backend dispatch, autograd, the registered ``torch.library`` ops, and
the transpose's prepared-call fast path. Modules here import torch; this file imports nothing."""
