package labserver

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/dralab/dralab/internal/driverauth"
	"github.com/dralab/dralab/internal/labstate"
	"github.com/dralab/dralab/lab/config"
)

// fakeTokens is an API server's token machinery as the keeper sees it:
// TokenRequests answered with a JWT issued at the wall clock's now, and
// TokenReviews that accept every token it issued but those refused.
type fakeTokens struct {
	mu      sync.Mutex
	now     time.Time
	issued  map[string]int // by node
	refused map[string]bool
	reviews int
}

func (f *fakeTokens) clock() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fakeTokens) advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
}

func (f *fakeTokens) client(t *testing.T, nodes ...string) *fake.Clientset {
	var objs []runtime.Object
	for _, n := range nodes {
		objs = append(objs, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n, UID: types.UID("uid-" + n)}})
	}
	c := fake.NewClientset(objs...)
	c.PrependReactor("create", "serviceaccounts", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "token" {
			return false, nil, nil
		}
		req := a.(k8stesting.CreateActionImpl).GetObject().(*authenticationv1.TokenRequest)
		f.mu.Lock()
		defer f.mu.Unlock()
		node := req.Spec.BoundObjectRef.Name
		f.issued[node]++
		claims := fmt.Sprintf(`{"iat":%d,"exp":%d,"node":%q,"n":%d}`, f.now.Unix(), f.now.Unix()+*req.Spec.ExpirationSeconds, node, f.issued[node])
		req.Status.Token = "e30." + base64.RawURLEncoding.EncodeToString([]byte(claims)) + ".sig"
		return true, req, nil
	})
	c.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		review := a.(k8stesting.CreateActionImpl).GetObject().(*authenticationv1.TokenReview)
		f.mu.Lock()
		defer f.mu.Unlock()
		f.reviews++
		for node := range f.refused {
			if tokenNode(t, review.Spec.Token) == node {
				review.Status.Error = "token has been invalidated"
				return true, review, nil
			}
		}
		review.Status.Authenticated = true
		return true, review, nil
	})
	return c
}

// tokenNode reads the node a fake token was issued for.
func tokenNode(t *testing.T, token string) string {
	t.Helper()
	parts := strings.Split(token, ".")
	data, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var claims struct{ Node string }
	if err := json.Unmarshal(data, &claims); err != nil {
		t.Fatal(err)
	}
	return claims.Node
}

// TestTokenKeeperRenewsByTheWallClock: a token is renewed once a third of
// its life has passed by the wall clock, at the first look after the
// machine slept (the monotonic clock, which timers run on, stood still
// meanwhile), not a renewal period of running time later; one the API
// server refuses is renewed at the next look, and a good one is left
// alone.
func TestTokenKeeperRenewsByTheWallClock(t *testing.T) {
	cfg, err := config.Parse("lab.yaml", []byte(`
apiVersion: lab.dralab.dev/v1alpha1
kind: Lab
name: tokens
nodes:
- name: n1
  gpus: {profile: h100-80gb, count: 1}
- name: n2
  gpus: {profile: l4-24gb, count: 1}
`))
	if err != nil {
		t.Fatal(err)
	}
	dir := labstate.Dir(t.TempDir())
	for _, n := range cfg.Nodes {
		if err := os.MkdirAll(string(dir.Node(n.Name)), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	f := &fakeTokens{now: time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC), issued: map[string]int{}, refused: map[string]bool{}}
	k := &tokenKeeper{client: f.client(t, "n1", "n2"), dir: dir, cfg: cfg, now: f.clock}
	ctx := context.Background()
	issued := func() string {
		f.mu.Lock()
		defer f.mu.Unlock()
		return fmt.Sprintf("n1:%d n2:%d", f.issued["n1"], f.issued["n2"])
	}

	k.check(ctx)
	if got := issued(); got != "n1:1 n2:1" {
		t.Fatalf("a keeper finding no token files issued %s; want one token each", got)
	}
	// Ten minutes of running: the tokens are good and the API server
	// accepts them.
	f.advance(10 * time.Minute)
	k.check(ctx)
	if got := issued(); got != "n1:1 n2:1" {
		t.Fatalf("after 10 min of a 1 h token the keeper issued %s; want none renewed", got)
	}
	if f.reviews != 2 {
		t.Errorf("the keeper asked %d TokenReviews; want 2, one per token", f.reviews)
	}
	// Lunch: the machine sleeps 70 min. The next look, one TokenCheck
	// after waking, finds both tokens expired and renews them.
	f.advance(70 * time.Minute)
	tick := make(chan time.Time)
	keepCtx, stop := context.WithCancel(ctx)
	kept := make(chan struct{})
	go func() { k.keep(keepCtx, tick); close(kept) }()
	tick <- time.Time{}
	// The second tick is taken once the first look is done.
	tick <- time.Time{}
	stop()
	<-kept
	if got := issued(); got != "n1:2 n2:2" {
		t.Fatalf("at the first look after a 70-min sleep the keeper issued %s; want both renewed", got)
	}
	for _, n := range []string{"n1", "n2"} {
		times, err := driverauth.ReadTokenTimes(dir.Node(n).Driver(labstate.RoleDriver).Token)
		if err != nil {
			t.Fatal(err)
		}
		if !times.Issued.Equal(f.clock()) || !times.Expires.After(f.clock()) {
			t.Errorf("node %s's token file holds a token issued %s, expiring %s; want one issued now (%s)", n, times.Issued, times.Expires, f.clock())
		}
	}
	// The API server stops accepting n2's token (its Node came back
	// with another UID, say): a driver gets 401, the keeper renews it.
	f.refused["n2"] = true
	f.advance(time.Minute)
	k.check(ctx)
	if got := issued(); got != "n1:2 n2:3" {
		t.Fatalf("with n2's token refused the keeper issued %s; want n2's alone renewed", got)
	}
}
