# The synthetic target's recipe: its constants are the whole "model". The synthetic target scores
# a recipe instantly from these values (see training/synthetic.py), so a swarm on it exercises the
# bus, the ladder, the ledger and the agents at full speed: a dry run, and the capacity benchmark.
# As in a real recipe, a few constants matter a lot and most hardly at all.
LR = 0.001  # best near 4e-3
WEIGHT_DECAY = 0.1  # best near 0.03
WARMUP_FRACTION = 0.05  # best near 0.12
INIT_SCALE = 1.0  # best near 0.5
GRAD_CLIP = 1.0
BETA1 = 0.9
BETA2 = 0.95
DROPOUT = 0.1
EMBED_LR_MULT = 1.0
HEAD_LR_MULT = 1.0
NORM_EPS = 1e-5
LOGIT_SCALE = 1.0
