"""Package discovery; everything else is declared in pyproject.toml.

setuptools finds every package under localspec/ (so a new subpackage can never be
left out of the wheel), plus the shipped example profiles, which live in the
top-level profiles/ folder and install as localspec.shipped_profiles.
"""

from setuptools import find_packages, setup

setup(
    packages=find_packages(include=["localspec", "localspec.*"]) + ["localspec.shipped_profiles"],
    package_dir={"localspec.shipped_profiles": "profiles"},
)
