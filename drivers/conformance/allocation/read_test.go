package allocation

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// Read lists a page at a time where the server pages: it asks for
// PageSize objects and follows each continue token to the end; a token
// that expired starts the list again whole. What the cluster does not
// serve is read as none and named.
func TestReadPages(t *testing.T) {
	defer func(n int64) { PageSize = n }(PageSize)
	PageSize = 3
	var all []resourceapi.ResourceSlice
	for i := range 8 {
		all = append(all, resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("s%d", i)},
			Spec: resourceapi.ResourceSliceSpec{Driver: drv, Pool: resourceapi.ResourcePool{Name: fmt.Sprintf("p%d", i), ResourceSliceCount: 1}}})
	}
	client := fake.NewClientset()
	var asked []string
	expireOnce := true
	client.PrependReactor("list", "resourceslices", func(a k8stesting.Action) (bool, runtime.Object, error) {
		o := a.(k8stesting.ListActionImpl).ListOptions
		asked = append(asked, fmt.Sprintf("limit=%d continue=%q", o.Limit, o.Continue))
		if o.Continue == "6" && expireOnce {
			expireOnce = false
			return true, nil, apierrors.NewResourceExpired("the continue token expired")
		}
		start, _ := strconv.Atoi(o.Continue)
		end := len(all)
		if o.Limit > 0 {
			end = min(end, start+int(o.Limit))
		}
		list := &resourceapi.ResourceSliceList{Items: all[start:end]}
		if end < len(all) {
			list.Continue = strconv.Itoa(end)
		}
		return true, list, nil
	})
	client.PrependReactor("list", "devicetaintrules", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewNotFound(schema.GroupResource{Group: "resource.k8s.io", Resource: "devicetaintrules"}, "")
	})
	s, err := Read(context.Background(), client, "", Vocabulary{})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{`limit=3 continue=""`, `limit=3 continue="3"`, `limit=3 continue="6"`, `limit=0 continue=""`}
	if fmt.Sprint(asked) != fmt.Sprint(want) {
		t.Errorf("asked %q, want %q", asked, want)
	}
	if len(s.Slices) != len(all) {
		t.Errorf("read %d slices, want %d (each once)", len(s.Slices), len(all))
	}
	if fmt.Sprint(s.NotServed) != "[devicetaintrules.resource.k8s.io]" {
		t.Errorf("NotServed = %v", s.NotServed)
	}
}
