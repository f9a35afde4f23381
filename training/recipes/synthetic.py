# The synthetic target's recipe: its constants are the whole "model". The synthetic target scores
# a recipe instantly from these values (see training/synthetic.py), so a swarm on it exercises the
# bus, the ladder, the ledger and the agents at full speed: a dry run, and the capacity benchmark.
# As in a real recipe, a few constants matter a lot and most hardly at all; the KNOBs (best left
# at 1.0) give many agents room for distinct ideas, most of them null, as real ideas mostly are.
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
KNOB_00 = 1.0
KNOB_01 = 1.0
KNOB_02 = 1.0
KNOB_03 = 1.0
KNOB_04 = 1.0
KNOB_05 = 1.0
KNOB_06 = 1.0
KNOB_07 = 1.0
KNOB_08 = 1.0
KNOB_09 = 1.0
KNOB_10 = 1.0
KNOB_11 = 1.0
KNOB_12 = 1.0
KNOB_13 = 1.0
KNOB_14 = 1.0
KNOB_15 = 1.0
KNOB_16 = 1.0
KNOB_17 = 1.0
KNOB_18 = 1.0
KNOB_19 = 1.0
KNOB_20 = 1.0
KNOB_21 = 1.0
KNOB_22 = 1.0
KNOB_23 = 1.0
KNOB_24 = 1.0
KNOB_25 = 1.0
KNOB_26 = 1.0
KNOB_27 = 1.0
KNOB_28 = 1.0
KNOB_29 = 1.0
KNOB_30 = 1.0
KNOB_31 = 1.0
KNOB_32 = 1.0
KNOB_33 = 1.0
KNOB_34 = 1.0
KNOB_35 = 1.0
KNOB_36 = 1.0
KNOB_37 = 1.0
KNOB_38 = 1.0
KNOB_39 = 1.0
