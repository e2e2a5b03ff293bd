package embedded

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/dralab/dralab/internal/driverauth"
	"github.com/dralab/dralab/internal/labstate"
	"github.com/dralab/dralab/internal/nodedrivers"
	"github.com/dralab/dralab/lab/config"
)

// tokensKeptTimeout bounds the wait for the lab process to renew tokens a
// sleep left overdue: it looks every TokenCheck.
const tokensKeptTimeout = 3 * driverauth.TokenCheck

// waitTokensKept waits until no token of the lab's drivers is overdue by
// the wall clock. A reused lab may come from a machine that slept past
// its drivers' renewal: the lab process renews them at its first look
// after waking, and a lab:up that returned before that would hand out a
// lab whose drivers the API server refuses.
func waitTokensKept(ctx context.Context, dir labstate.Dir, cfg *config.Config, timeout time.Duration) error {
	var overdue []string
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		overdue = overdue[:0]
		now := time.Now()
		for _, n := range cfg.Nodes {
			nd := dir.Node(n.Name)
			for _, role := range nodedrivers.Roles() {
				path := nd.Driver(role).Token
				times, err := driverauth.ReadTokenTimes(path)
				switch {
				case errors.Is(err, fs.ErrNotExist):
				case err != nil:
					overdue = append(overdue, err.Error())
				case times.Overdue(now):
					overdue = append(overdue, fmt.Sprintf("%s (to be renewed at %s)", path, times.RenewAt().Format(time.RFC3339)))
				}
			}
		}
		return len(overdue) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("the lab process did not renew its drivers' tokens within %s (was the machine asleep? the API server refuses them): %s; see the lab log in %s",
			timeout, strings.Join(overdue, "; "), dir.Logs())
	}
	return nil
}
