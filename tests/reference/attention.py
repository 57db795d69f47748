"""Reference attention-family routers in float64."""

import numpy as np

from tests.reference.ops import efficient_squash, safe_norm, softmax, squash


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


def sparsemax(x, axis=-1):
    """Martins & Astudillo (2016), Algorithm 1, one row at a time, on
    `x - max(x)` (the same projection; keeps the `1` of the support test
    for logits up to 1e30 in float64 too)."""
    x = np.moveaxis(np.asarray(x, np.float64), axis, -1)
    x = x - x.max(axis=-1, keepdims=True)
    out = np.zeros_like(x)
    for idx in np.ndindex(x.shape[:-1]):
        z = np.sort(x[idx])[::-1]
        k = np.arange(1, z.size + 1)
        k_z = k[1 + k * z > np.cumsum(z)].max()
        tau = (z[:k_z].sum() - 1) / k_z
        out[idx] = np.maximum(x[idx] - tau, 0)
    return np.moveaxis(out, -1, axis)


def keras_buggy_sparsemax(x):
    """The threshold of `keras.ops.sparsemax` in Keras <= 3.15.1
    (keras-team/keras#23425): it sums every cumulative sum over the support
    instead of taking the k-th. Kept only to show that the tests catch it."""
    z = -np.sort(-x, axis=-1)
    cumsum = np.cumsum(z, axis=-1)
    r = np.arange(1, x.shape[-1] + 1)
    support = z - (cumsum - 1) / r > 0
    k = support.sum(axis=-1, keepdims=True)
    tau = (np.where(support, cumsum, 0).sum(axis=-1, keepdims=True) - 1) / k
    return np.maximum(x - tau, 0)


def top_k_softmax(x, k, mask=None):
    """Softmax over each row's k largest (allowed) entries, others 0."""
    allowed = np.ones(x.shape, bool) if mask is None else np.broadcast_to(mask, x.shape)
    masked = np.where(allowed, x, -np.inf)
    kth = -np.sort(-masked, axis=-1)[..., k - 1 : k]
    keep = (masked >= kth) & allowed
    e = np.where(keep, np.exp(x - np.max(masked, axis=-1, keepdims=True)), 0.0)
    return e / e.sum(axis=-1, keepdims=True)


def sparse_attention_routing(votes, temperature=1.0, top_k=None):
    logits = agreement_logits(votes) / temperature
    c = sparsemax(logits, axis=2) if top_k is None else top_k_softmax(logits, top_k)
    poses = squash(np.einsum("bij,bijd->bjd", c, votes))
    return poses, safe_norm(poses), c


def layer_norm(x, scale, offset, epsilon=1e-5):
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + epsilon) * scale + offset


def inverted_dot_product_routing(votes, scale, offset, iterations=2, temperature=1.0):
    out_caps, dim = votes.shape[2], votes.shape[3]
    r = np.full(votes.shape[:3], 1.0 / out_caps)
    s = np.einsum("bij,bijd->bjd", r, votes)
    v = layer_norm(s, scale, offset)
    for _ in range(iterations - 1):
        r = softmax(np.einsum("bijd,bjd->bij", votes, v) / (np.sqrt(dim) * temperature), axis=2)
        s = np.einsum("bij,bijd->bjd", r, votes)
        v = layer_norm(s, scale, offset)
    n2 = (s**2).sum(axis=-1)
    return v, n2 / (1 + n2), r


def self_routing(votes, weights, bias, activations=None):
    """Hahn et al. (2019) on votes; 1e-7 keeps the divisions finite."""
    if activations is None:
        activations = np.ones(votes.shape[:2])
    r = softmax(np.einsum("bijd,ijd->bij", votes, weights) + bias, axis=2)
    ar = activations[:, :, None] * r
    out_activations = ar.sum(axis=1) / (activations.sum(axis=1, keepdims=True) + 1e-7)
    poses = np.einsum("bij,bijd->bjd", ar, votes) / (ar.sum(axis=1)[..., None] + 1e-7)
    return poses, out_activations, r


def capsule_attention(
    x, query_kernel, key_kernel, num_heads, top_k=None, window_size=None, squash_output=False
):
    """Multi-head self-attention among capsules; returns (outputs, scores)."""
    batch, n, dim = x.shape
    head = dim // num_heads

    def split(t):
        return t.reshape(batch, n, num_heads, head).transpose(0, 2, 1, 3)

    q, k, v = split(x @ query_kernel), split(x @ key_kernel), split(x)
    logits = q @ k.transpose(0, 1, 3, 2) / np.sqrt(head)
    mask = np.ones((n, n), bool)
    if window_size is not None:
        pos = np.arange(n)
        mask = np.abs(pos[:, None] - pos[None, :]) <= window_size // 2
    if top_k is None:
        masked = np.where(mask, logits, -np.inf)
        e = np.exp(masked - masked.max(axis=-1, keepdims=True))
        scores = e / e.sum(axis=-1, keepdims=True)
    else:
        scores = top_k_softmax(logits, min(top_k, n), mask)
    out = (scores @ v).transpose(0, 2, 1, 3).reshape(batch, n, dim)
    return (squash(out) if squash_output else out), scores


def capsule_pruning(x, threshold=0.95):
    """Zeroes capsules whose cosine with an earlier capsule > threshold."""
    n = safe_norm(x)
    cos = np.einsum("bid,bjd->bij", x, x) / (n[:, :, None] * n[:, None, :])
    earlier = np.tril(np.ones(cos.shape[1:], bool), k=-1)
    pruned = np.any((cos > threshold) & earlier, axis=2)
    return x * (~pruned)[..., None]


def householder_orthogonal(v, rows, cols):
    """Top-left rows x cols block of H(v_1) ... H(v_n), one matrix per
    leading index; H(u) = I - 2 u u^T / (u^T u)."""
    n = v.shape[-1]
    out = np.zeros((*v.shape[:-2], rows, cols))
    for idx in np.ndindex(v.shape[:-2]):
        q = np.eye(n)
        for u in v[idx]:
            q = q @ (np.eye(n) - 2 * np.outer(u, u) / (u @ u))
        out[idx] = q[:rows, :cols]
    return out


def cross_attention_routing(votes, queries, num_heads, activations=None):
    """Learned parent queries (j, dim) attend, head by head, over the
    children's votes (keys and values); softmax over the children."""
    batch, children, parents, dim = votes.shape
    head_dim = dim // num_heads
    u = votes.reshape(batch, children, parents, num_heads, head_dim)
    q = queries.reshape(parents, num_heads, head_dim)
    logits = np.einsum("bijhd,jhd->bijh", u, q) / np.sqrt(head_dim)
    if activations is not None:
        logits = logits + np.log(activations)[:, :, None, None]
    c = softmax(logits, axis=1)
    poses = squash(np.einsum("bijh,bijhd->bjhd", c, u).reshape(batch, parents, dim))
    return poses, safe_norm(poses), c.mean(-1)
