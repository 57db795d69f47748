"""Reference attention-family routers in float64."""

import numpy as np

from tests.reference.ops import efficient_squash, safe_norm, softmax


def agreement_logits(votes):
    """`A[b,i,j] = votes[b,i,j] . sum_k votes[b,k,j] / sqrt(dim)`."""
    consensus = votes.sum(axis=1)
    return np.einsum("bijd,bjd->bij", votes, consensus) / np.sqrt(votes.shape[-1])


def self_attention_routing(votes, priors=None, temperature=1.0):
    c = softmax(agreement_logits(votes) / temperature, axis=2)
    if priors is not None:
        c = c + priors
    poses = efficient_squash(np.einsum("bij,bijd->bjd", c, votes))
    return poses, safe_norm(poses), c
