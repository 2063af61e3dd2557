"""The namespace policy: what a namespace may ask for (classes, headroom, GPU-time budgets), read
from the operator's policy file. Shared by the operator and the webhook, so it belongs to
neither.
"""
