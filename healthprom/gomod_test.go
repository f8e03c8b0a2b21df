package healthprom

import (
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHealthVersionIsOnThisBranch keeps go.mod's requirement of health one
// that a user can resolve. Only the branch main lands in this repository
// and nothing is tagged, so the one version that outside builds can
// resolve is a pseudo-version of a commit on main: vX.0.0 while no tag
// precedes it, then the commit's committer time in UTC, then the first 12
// hex digits of its hash. The replace directive hides a wrong version from
// this module's own builds, so only this test sees it. It asks git, and
// skips where there is no history to ask (an export, a shallow clone).
func TestHealthVersionIsOnThisBranch(t *testing.T) {
	gomod, err := os.ReadFile("go.mod")
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^\s*github\.com/meshnode/health (v\S+)`).FindSubmatch(gomod)
	require.NotNil(t, m, "go.mod requires github.com/meshnode/health")
	version := string(m[1])
	pseudo := regexp.MustCompile(`^(v\d+\.\d+\.\d+)-(?:.*\.)?(\d{14})-([0-9a-f]{12})$`).FindStringSubmatch(version)
	require.NotNil(t, pseudo, "health %s is not a pseudo-version: no tag exists for a user to resolve", version)
	base, stamp, hash := pseudo[1], pseudo[2], pseudo[3]

	gitPath, err := exec.LookPath("git")
	if err != nil {
		t.Skip("no git on PATH: cannot check the commit health's version names")
	}
	git := func(args ...string) (string, error) {
		out, err := exec.Command(gitPath, args...).CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	if _, err := git("rev-parse", "--git-dir"); err != nil {
		t.Skip("not a git checkout: cannot check the commit health's version names")
	}
	if shallow, _ := git("rev-parse", "--is-shallow-repository"); shallow == "true" {
		t.Skip("a shallow clone: the commit health's version names may be outside its history")
	}

	full, err := git("rev-parse", "--verify", "--quiet", hash+"^{commit}")
	require.NoError(t, err, "health %s: no commit %s in this repository", version, hash)
	_, err = git("merge-base", "--is-ancestor", full, "HEAD")
	assert.NoError(t, err, "health %s: commit %s is not an ancestor of HEAD, so main may not hold it", version, hash)

	committed, err := git("log", "-1", "--format=%ct", full)
	require.NoError(t, err)
	seconds, err := strconv.ParseInt(committed, 10, 64)
	require.NoError(t, err, "committer time %q", committed)
	want := time.Unix(seconds, 0).UTC().Format("20060102150405")
	assert.Equal(t, want, stamp, "health %s: the timestamp is not commit %s's committer time in UTC", version, hash)

	if tags, _ := git("tag", "--merged", full, "--list", "v*"); tags == "" {
		assert.Equal(t, "v0.0.0", base, "health %s: no tag precedes commit %s, so the form is v0.0.0-…", version, hash)
	}
}
