import unittest

from versions import Version, bump


class BumpTest(unittest.TestCase):
    def test_bump_major(self):
        self.assertEqual(bump(Version(1, 2, 3), "major"), Version(2, 0, 0))

    def test_bump_minor(self):
        start = Version(1, 2, 3)
        self.assertEqual(bump(start, "minor"), Version(1, 3, 0))

    def test_bump_patch(self):
        self.assertEqual(bump(Version(1, 2, 3), "patch"), Version(1, 2, 4))


if __name__ == "__main__":
    unittest.main()
