"""The tiny model shapes the tests build, written once. Test modules and the subprocess workers import them from
here (it imports nothing, so a worker can too); tests/conftest.py re-exports TINY and gives it as `tiny_kwargs`."""

# A model small enough to build and run in well under a second on a laptop CPU: at image_size 32, 16 patches of
# 8 pixels, width 48 (3 heads of 16), 2 blocks. Tests add image_size, classes and the options they exercise.
TINY = dict(patch_size=8, hidden_size=48, num_layers=2, num_heads=3, mlp_dim=96)

# The training tests' model, on 16-pixel images (16 patches of 4): one block of width 32, since they run optimizer
# steps, not single forward passes. The distributed and cross-backend tolerances (tests/test_training_distributed.py,
# tests/backend_worker.py) were measured on this model, so it is a distinct shape rather than TINY.
TINY_TRAINING = dict(patch_size=4, hidden_size=32, num_layers=1, num_heads=2, mlp_dim=64)
