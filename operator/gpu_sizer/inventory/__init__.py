"""What GPUs the cluster offers: classes per node from the GPU Feature Discovery labels (nodes),
devices published as DRA ResourceSlices (dra), and the Kueue AdmissionCheck decision on a quota's
flavors (kueue_check). Pure: the controller feeds them the objects it watches.
"""
