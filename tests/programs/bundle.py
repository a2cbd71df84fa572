"""Bundle adjustment: reprojection error summed observation by observation.

Each camera is 11 numbers (Rodrigues rotation, center, focal length, principal point, two radial
distortion coefficients); each observation names a camera, a point and where the point was seen.
"""
import numpy as np

ROT, C, F, X0, RAD = 0, 3, 6, 7, 9


def rodrigues_rotate(rot, X):
    theta = np.sqrt(np.sum(rot ** 2))
    if theta < 1e-12:
        return X + np.cross(rot, X)
    w = rot / theta
    cos_t, sin_t = np.cos(theta), np.sin(theta)
    return X * cos_t + np.cross(w, X) * sin_t + w * np.dot(w, X) * (1 - cos_t)


def radial_distort(k, proj):
    r2 = np.sum(proj ** 2)
    return proj * (1.0 + k[0] * r2 + k[1] * r2 * r2)


def project(cam, X):
    Xcam = rodrigues_rotate(cam[ROT:ROT + 3], X - cam[C:C + 3])
    distorted = radial_distort(cam[RAD:RAD + 2], Xcam[:2] / Xcam[2])
    return distorted * cam[F] + cam[X0:X0 + 2]


def reprojection_error(cams, X, w, obs, feats):
    """obs[i] = (camera index, point index); feats[i] is where the point was seen."""
    total = 0.0
    for i in range(len(obs)):
        cam_idx, pt_idx = obs[i]
        err = w[i] * (project(cams[cam_idx], X[pt_idx]) - feats[i])
        total = total + np.sum(err ** 2)
    weight_penalty = np.sum((1 - w ** 2) ** 2)
    return total + weight_penalty


def make_inputs(seed=0, size="small", n_obs=None):
    """``n_obs`` overrides the size's number of observations (the cameras and points stay as sized)."""
    n_cams, n_pts, n = (3, 5, 10) if size == "small" else (20, 300, 2000)
    n_obs = n if n_obs is None else n_obs
    rs = np.random.RandomState(seed)
    cams = np.zeros((n_cams, 11))
    cams[:, ROT:ROT + 3] = 0.1 * rs.randn(n_cams, 3)
    cams[:, C:C + 3] = rs.randn(n_cams, 3) * 0.2 + np.array([0.0, 0.0, -5.0])
    cams[:, F] = 1.0 + 0.1 * rs.rand(n_cams)
    cams[:, X0:X0 + 2] = 0.01 * rs.randn(n_cams, 2)
    cams[:, RAD:RAD + 2] = 0.01 * rs.randn(n_cams, 2)
    X = rs.randn(n_pts, 3)
    w = 1.0 + 0.1 * rs.randn(n_obs)
    obs = np.stack([np.arange(n_obs) % n_cams, rs.randint(n_pts, size=n_obs)], axis=1)
    feats = 0.2 * rs.randn(n_obs, 2)
    return (cams, X, w, obs, feats), {}


PROGRAM = {"f": "reprojection_error", "argnums": (0, 1, 2), "njit": True, "autograd": True, "heavy": True}
