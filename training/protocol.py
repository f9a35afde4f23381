"""The pipe protocol between the runner (trusted) and the experiment process (untrusted).

The experiment never gets a data file: it asks the runner for each training batch, and the
runner stops answering when the budget is spent. For evaluation the runner sends held-out windows
and receives the model's logits; it computes the metric itself.

Experiment → runner, one byte of kind then a fixed header. First, before any recipe code runs:
  S                        confined (or unconfined where the user allowed it)
  X                        the sandbox could not be applied: the process ends, nothing ran
  B <II batch, context>    ask for a batch; answer <Id nbytes, progress> + nbytes of uint8
                           (batch × (context + 1)); nbytes 0 means the budget is spent
  L <d loss>               the loss of the last step (the runner fails fast on NaN/inf)
  I <I n> + n bytes JSON   facts for the summary (parameters, device)
  D                        the trained model is saved (`model.pt`); the training stage ends
An evaluation process (a fresh one per batch, see fresh_eval.py) sends:
  E                        ask for its windows; answer <II n, context> + n × context bytes
                           (the inputs only)
  O + n × context × 256 float32 logits for the windows just sent
"""

from __future__ import annotations

import os
import struct

VOCAB = 256
BATCH_ASK = struct.Struct("<II")
BATCH_ANSWER = struct.Struct("<Id")
LOSS = struct.Struct("<d")
INFO = struct.Struct("<I")
EVAL_ANSWER = struct.Struct("<II")


class ProtocolError(RuntimeError):
    pass


def read_exact(fd: int, n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise ProtocolError(f"pipe closed with {left} of {n} bytes unread")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
