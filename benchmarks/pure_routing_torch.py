"""Hand-written plain-PyTorch routers: the baselines of benchmarks/routing.py.

The same math as the library's routers (see their docstrings and the
float64 references in tests/reference/), written the way a PyTorch user
would: eager autograd, votes copied once into a contiguous parent-major
`(batch, out, in, dim)` layout so every sum over children is one batched
matmul (self-routing, with only two passes over the votes, is faster
without the copy). `ROUTERS[class name](config, weights)` returns `route(votes) ->
(poses, activations)` for the router's `get_config()` and its weights
`{name: numpy array}`; `activations=None` (all children active).
"""

import math

import harness
import torch
import torch.nn.functional as F


def _parent_major(votes):
    return votes.transpose(1, 2).contiguous()


def _weighted_sum(c, u):
    """`sum_i c[b, j, i] u[b, j, i, :]`: one batched matvec."""
    return (c.unsqueeze(2) @ u).squeeze(2)


def _dot(u, v):
    """`u[b, j, i, :] . v[b, j, :]`: one batched matvec."""
    return (u @ v.unsqueeze(-1)).squeeze(-1)


def _norm(x, epsilon=1e-7):
    return torch.sqrt((x * x).sum(-1) + epsilon)


def _squash(s, epsilon=1e-7):
    n2 = (s * s).sum(-1, keepdim=True)
    return n2 / (1.0 + n2) * s / torch.sqrt(n2 + epsilon)


def _efficient_squash(s, epsilon=1e-7):
    n = torch.sqrt((s * s).sum(-1, keepdim=True) + epsilon)
    return (1.0 - torch.exp(-n)) * s / n


def _tensor(weights, name):
    return torch.as_tensor(weights[name], dtype=torch.float32)


def dynamic(config, weights):
    if config["agreement"] != "dot":
        raise NotImplementedError("the pure baseline implements agreement='dot'")
    iterations, temperature = config["iterations"], config["temperature"]
    step_size, stop = config["step_size"], config["stop_gradient"]

    def route(votes):
        out_caps = votes.shape[2]
        u = _parent_major(votes)
        early = u.detach() if stop else u
        logits = None
        for r in range(iterations):
            last = r == iterations - 1
            uu = u if last else early
            if logits is None:
                s = uu.sum(2) / out_caps  # softmax(0) is uniform
            else:
                s = _weighted_sum(torch.softmax(logits / temperature, dim=1), uu)
            v = _squash(s)
            if not last:
                update = _dot(uu, v) * step_size
                logits = update if logits is None else logits + update
        return v, _norm(v)

    return route


def _agreement_logits(u, temperature):
    return _dot(u, u.sum(2)) / (math.sqrt(u.shape[-1]) * temperature)


def self_attention(config, weights):
    temperature = config["temperature"]
    priors = _tensor(weights, "priors").T if config["use_priors"] else None

    def route(votes):
        u = _parent_major(votes)
        c = torch.softmax(_agreement_logits(u, temperature), dim=1)
        if priors is not None:
            c = c + priors
        poses = _efficient_squash(_weighted_sum(c, u))
        return poses, _norm(poses)

    return route


def _sparsemax(z, dim):
    """Martins & Astudillo (2016); autograd through the sort gives its Jacobian."""
    n = z.shape[dim]
    z_sorted = torch.sort(z, dim=dim, descending=True).values
    shape = [1] * z.dim()
    shape[dim] = n
    k = torch.arange(1, n + 1, dtype=z.dtype).view(shape)
    cumsum = z_sorted.cumsum(dim)
    k_z = (1 + k * z_sorted > cumsum).sum(dim, keepdim=True)
    tau = (cumsum.gather(dim, k_z - 1) - 1) / k_z
    return torch.clamp(z - tau, min=0)


def _top_k_softmax(z, k, dim):
    kth = z.topk(k, dim=dim).values.narrow(dim, k - 1, 1)
    return torch.softmax(z.masked_fill(z < kth, float("-inf")), dim=dim)


def sparse_attention(config, weights):
    temperature, top_k = config["temperature"], config["top_k"]

    def route(votes):
        u = _parent_major(votes)
        logits = _agreement_logits(u, temperature)
        if top_k is None:
            c = _sparsemax(logits, dim=1)
        else:
            c = _top_k_softmax(logits, top_k, dim=1)
        poses = _squash(_weighted_sum(c, u))
        return poses, _norm(poses)

    return route


def inverted_dot_product(config, weights):
    iterations, temperature = config["iterations"], config["temperature"]
    scale, offset = _tensor(weights, "scale"), _tensor(weights, "offset")

    def route(votes):
        out_caps, dim = votes.shape[2], votes.shape[3]
        u = _parent_major(votes)
        s = u.sum(2) / out_caps
        v = F.layer_norm(s, (dim,), scale, offset, eps=1e-5)
        for _ in range(iterations - 1):
            c = torch.softmax(_dot(u, v) / (math.sqrt(dim) * temperature), dim=1)
            s = _weighted_sum(c, u)
            v = F.layer_norm(s, (dim,), scale, offset, eps=1e-5)
        # Activations: the squashed length of the last sum, n2 / (1 + n2).
        n2 = (s * s).sum(-1)
        return v, n2 / (1.0 + n2)

    return route


def self_routing(config, weights):
    kernel = _tensor(weights, "routing_kernel")  # (I, J, D)
    bias = _tensor(weights, "routing_bias")  # (I, J)

    def route(votes):
        # Child-major: two passes over the votes, a parent-major copy would
        # be a third (measured slower here).
        in_caps = votes.shape[1]
        r = torch.softmax((votes * kernel).sum(-1) + bias, dim=-1)
        mass = r.sum(1)
        poses = torch.einsum("bij,bijd->bjd", r, votes) / (mass.unsqueeze(-1) + 1e-7)
        return poses, mass / (in_caps + 1e-7)

    return route


def em(config, weights):
    iterations, epsilon = config["iterations"], config["epsilon"]
    lambdas = harness.em_inverse_temperatures(config)
    beta_u = _tensor(weights, "beta_u")[:, None]
    beta_a = _tensor(weights, "beta_a")

    def route(votes):
        batch, in_caps, out_caps, _ = votes.shape
        u = _parent_major(votes)  # (B, J, I, P)
        r = torch.full((batch, out_caps, in_caps), 1.0 / out_caps)
        for t, lam in enumerate(lambdas):
            r_sum = r.sum(2) + 1e-7  # all children active: a_in = 1
            mu = _weighted_sum(r, u) / r_sum[..., None]
            sq_dev = (u - mu.unsqueeze(2)) ** 2
            var = _weighted_sum(r, sq_dev) / r_sum[..., None] + epsilon
            log_var = torch.log(var)
            cost = (beta_u + 0.5 * log_var).sum(-1) * (r_sum * out_caps / in_caps)
            logits = lam * (beta_a - cost)
            a_out = torch.sigmoid(logits)
            if t < iterations - 1:
                log_p = -0.5 * _dot(sq_dev, 1.0 / var)
                log_p = log_p - 0.5 * (log_var + math.log(2 * math.pi)).sum(-1, keepdim=True)
                r = torch.softmax(F.logsigmoid(logits).unsqueeze(-1) + log_p, dim=1)
        return mu, a_out

    return route


ROUTERS = {
    "DynamicRouting": dynamic,
    "SelfAttentionRouting": self_attention,
    "SparseAttentionRouting": sparse_attention,
    "InvertedDotProductRouting": inverted_dot_product,
    "SelfRouting": self_routing,
    "EMRouting": em,
}


def loss(outputs):
    poses, activations = outputs
    return (poses * poses).sum() + activations.sum()
