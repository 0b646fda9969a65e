"""A version is three numbers; bumping one part resets the parts after it."""


class Version:
    def __init__(self, major, minor=0, patch=0):
        self.major = major
        self.minor = minor
        self.patch = patch

    def _key(self):
        return (self.major, self.minor, self.patch)

    def __eq__(self, other):
        if not isinstance(other, Version):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    def __repr__(self):
        return f"Version({self.major}, {self.minor}, {self.patch})"


def parse(text):
    """`"1.2.3"` -> Version(1, 2, 3); missing parts are 0."""
    parts = [int(p) for p in text.strip().split(".")]
    if not 1 <= len(parts) <= 3:
        raise ValueError(f"not a version: {text!r}")
    return Version(*parts)


def bump(version, part):
    """The next version after `version` in `part` ("major", "minor" or "patch")."""
    if part == "major":
        return Version(version.major + 1, 0, 0)
    if part == "minor":
        return Version(version.major, version.minor + 1, version.patch)
    if part == "patch":
        return Version(version.major, version.minor, version.patch + 1)
    raise ValueError(f"unknown part: {part!r}")
