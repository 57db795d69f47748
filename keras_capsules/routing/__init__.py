"""Routing algorithms: each maps child votes to parent poses and activations."""

from keras_capsules.routing.base import Router
from keras_capsules.routing.dynamic import DynamicRouting
from keras_capsules.routing.self_attention import SelfAttentionRouting
from keras_capsules.routing.sparse_attention import SparseAttentionRouting
from keras_capsules.routing.inverted_dot_product import InvertedDotProductRouting
from keras_capsules.routing.self_routing import SelfRouting
from keras_capsules.routing.em import EMRouting
