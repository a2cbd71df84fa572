"""A small convolutional classifier: convolution by loops over filters, channels and kernel offsets."""
import numpy as np


def relu(x):
    return np.maximum(x, 0.0)


def log_softmax(logits):
    shifted = logits - np.max(logits, axis=1, keepdims=True)
    return shifted - np.log(np.sum(np.exp(shifted), axis=1, keepdims=True))


def conv2d_valid(image, kernel):
    """'valid' cross-correlation of one (H, W) image with one (kh, kw) kernel."""
    kh, kw = kernel.shape
    H, W = image.shape
    oh, ow = H - kh + 1, W - kw + 1
    out = np.zeros((oh, ow))
    for i in range(kh):
        for j in range(kw):
            out = out + kernel[i, j] * image[i:i + oh, j:j + ow]
    return out


def conv_layer(images, filters, biases):
    """images (N, C, H, W), filters (F, C, kh, kw), biases (F,) -> feature maps (N, F, H', W')."""
    batch = []
    for n in range(images.shape[0]):
        maps = []
        for f in range(filters.shape[0]):
            acc = biases[f]
            for c in range(images.shape[1]):
                acc = acc + conv2d_valid(images[n, c], filters[f, c])
            maps.append(acc)
        batch.append(np.stack(maps))
    return np.stack(batch)


def avgpool(x, size=2):
    N, F, H, W = x.shape
    x = x.reshape(N, F, H // size, size, W // size, size)
    return x.mean(axis=(3, 5))


def predict(params, images):
    h = relu(conv_layer(images, params["filters"], params["conv_b"]))
    h = avgpool(h)
    h = h.reshape(h.shape[0], -1)
    return log_softmax(h @ params["W"] + params["b"])


def loss(params, images, labels):
    return -np.mean(np.sum(predict(params, images) * labels, axis=1))


def make_inputs(seed=0, size="small"):
    rs = np.random.RandomState(seed)
    N, C, H, F, k, classes = (3, 2, 7, 3, 2, 4) if size == "small" else (16, 1, 14, 6, 3, 10)
    out = (H - k + 1) // 2
    params = {
        "filters": 0.5 * rs.randn(F, C, k, k),
        "conv_b": 0.1 * rs.randn(F),
        "W": 0.3 * rs.randn(F * out * out, classes),
        "b": np.zeros(classes),
    }
    images = rs.randn(N, C, H, H)
    labels = np.eye(classes)[rs.randint(classes, size=N)]
    return (params, images, labels), {}


# njit: False. ``acc`` starts as a number (biases[f]) and becomes an array: Python is fine with that, Numba's
# nopython mode is not, so auto runs this program as Python over compiled kernels (warning once).
PROGRAM = {"f": "loss", "argnums": (0,), "njit": False, "autograd": True, "heavy": True}
