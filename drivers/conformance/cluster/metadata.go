package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/api/metadata"
	metadatav1beta1 "k8s.io/dynamic-resource-allocation/api/metadata/v1beta1"
)

// metadataPrinter shows the device metadata files a container finds: each
// on a line of its own, its path, "=", and its content without line
// breaks (the stream's objects one after the other).
var metadataPrinter = []string{"sh", "-c", `for f in $(find ` + metadata.ContainerDir + ` -name '*.json' 2>/dev/null); do echo "$f=$(tr -d '\n' < "$f")"; done; exec sleep 1000000`}

// deviceMetadata: a pod given one device of the class prints the device
// metadata files its container finds. The one of its claim's request must
// be there, at the path Kubernetes documents for a claim the pod names, and
// its first object (metadata.resource.k8s.io/v1beta1, 1.37's) must name
// the claim and exactly the allocated device, with the attributes the
// device's ResourceSlice publishes.
func (s *suite) deviceMetadata(ctx context.Context, logf logFunc, k *kit) error {
	const name, request = "meta", "dev"
	if err := k.createClaim(ctx, name, k.request(request)); err != nil {
		return err
	}
	if err := k.pod(ctx, name, []string{name}, func(p *v1.Pod) { p.Spec.Containers[0].Command = metadataPrinter }); err != nil {
		return err
	}
	path := metadata.ResourceClaimFilePath(k.m.Driver, name, request)
	var content string
	err := poll(ctx, k.m.Timeouts.PodRunning, "pod "+name+"'s container to show "+path, func(ctx context.Context) (string, bool, error) {
		pod, err := k.client.CoreV1().Pods(k.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return "", false, err
		}
		if pod.Status.Phase != v1.PodRunning {
			return podState(pod), false, k.keptOff(ctx, pod)
		}
		logs, err := k.client.CoreV1().Pods(k.ns).GetLogs(name, &v1.PodLogOptions{}).DoRaw(ctx)
		if err != nil {
			return podState(pod), false, err
		}
		for _, line := range strings.Split(string(logs), "\n") {
			if p, c, ok := strings.Cut(strings.TrimSpace(line), "="); ok && p == path {
				content = c
				return "", true, nil
			}
		}
		return "running; its log shows no " + path + ":\n" + string(logs), false, nil
	})
	if err != nil {
		return err
	}
	results, err := k.claimResults(ctx, name)
	if err != nil {
		return err
	}
	claim, err := k.client.ResourceV1().ResourceClaims(k.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	var dm metadatav1beta1.DeviceMetadata
	if err := json.NewDecoder(strings.NewReader(content)).Decode(&dm); err != nil {
		return fmt.Errorf("the device metadata file %s does not decode: %w", path, err)
	}
	if gv := metadatav1beta1.SchemeGroupVersion.String(); dm.APIVersion != gv || dm.Kind != "DeviceMetadata" {
		return fmt.Errorf("the device metadata file %s starts with %s %s, want DeviceMetadata of %s first", path, dm.APIVersion, dm.Kind, gv)
	}
	if dm.Name != claim.Name || dm.Namespace != claim.Namespace || dm.UID != claim.UID {
		return fmt.Errorf("the device metadata file %s names claim %s/%s (uid %s), not %s/%s (uid %s)", path, dm.Namespace, dm.Name, dm.UID, claim.Namespace, claim.Name, claim.UID)
	}
	var want []string
	for _, r := range results {
		if r.Driver == k.m.Driver {
			want = append(want, r.Pool+"/"+r.Device)
		}
	}
	var got []string
	for _, req := range dm.Requests {
		for _, d := range req.Devices {
			got = append(got, fmt.Sprintf("request %s: %s %s/%s", req.Name, d.Driver, d.Pool, d.Name))
		}
	}
	if len(dm.Requests) != 1 || dm.Requests[0].Name != request || len(dm.Requests[0].Devices) != len(want) || len(want) != 1 {
		return fmt.Errorf("the device metadata file %s names %v; claim %s was allocated %v for request %s", path, got, name, want, request)
	}
	d := dm.Requests[0].Devices[0]
	if d.Driver != k.m.Driver || d.Pool+"/"+d.Name != want[0] {
		return fmt.Errorf("the device metadata file %s names %v; claim %s was allocated %s of %s", path, got, name, want[0], k.m.Driver)
	}
	list, err := k.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, sl := range list.Items {
		if sl.Spec.Driver != d.Driver || sl.Spec.Pool.Name != d.Pool {
			continue
		}
		for _, dev := range sl.Spec.Devices {
			if dev.Name != d.Name {
				continue
			}
			if !apiequality.Semantic.DeepEqual(dev.Attributes, d.Attributes) {
				return fmt.Errorf("the device metadata file %s gives %s/%s the attributes %v; its ResourceSlice %s publishes %v", path, d.Pool, d.Name, d.Attributes, sl.Name, dev.Attributes)
			}
			logf("pod %s's container found %s: claim %s, request %s, %s/%s with the %d attributes of ResourceSlice %s", name, path, name, request, d.Pool, d.Name, len(d.Attributes), sl.Name)
			return nil
		}
	}
	return fmt.Errorf("the device metadata file %s names %s/%s, which no ResourceSlice of %s publishes", path, d.Pool, d.Name, d.Driver)
}
