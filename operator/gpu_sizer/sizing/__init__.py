"""Where a spec fits: the verdict and its computed fixes (verdict, assessment), the verdict of a
pre-allocating engine per class (pool_verdict), the fixes' cost order and the serving-fraction
fix (fix_cost, fraction_fix), workers for a job wider than a node (workers) and the pod placement
a class needs (placement). Pure: no Kubernetes client, no kopf.
"""
