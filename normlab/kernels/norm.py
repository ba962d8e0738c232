# PLACEHOLDER: replaced by the norm-kernels work.
def rms_norm(*a, **k):
    raise NotImplementedError


def layer_norm(*a, **k):
    raise NotImplementedError
