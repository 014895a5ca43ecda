package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"
)

// RemoveTemps deletes the temporary files a crash during Write left beside
// path (".<name>.tmp-*"), and returns how many it removed. Call it at boot,
// before the owner of path writes, so no Write in progress is disturbed.
func RemoveTemps(path string) (int, error) {
	dir := filepath.Dir(path)
	matches, err := filepath.Glob(filepath.Join(dir, "."+filepath.Base(path)+".tmp-*"))
	if err != nil {
		return 0, fmt.Errorf("list temporary files of %s: %w", path, err)
	}
	n := 0
	for _, m := range matches {
		if err := os.Remove(m); err != nil && !os.IsNotExist(err) {
			return n, fmt.Errorf("remove %s: %w", m, err)
		}
		n++
	}
	return n, nil
}
