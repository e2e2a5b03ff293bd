// Package driverauth says what a DRA driver's kubelet plugin may do in a
// cluster: the rules of the dralab-driver chart's ClusterRole and its
// ValidatingAdmissionPolicy, which pins ResourceSlice writes to the node a
// plugin's token is bound to. The embedded lab grants its drivers exactly
// these (internal/labserver), and charts' tests compare them with what the
// chart renders, so a driver that works in the lab has what it would have
// in a cluster, and no more.
package driverauth

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// Modes of a driver, as the chart's mode value names them.
const (
	ModeDRA          = "dra"
	ModeDevicePlugin = "device-plugin"
	// ModeNetworkAttached is a kubelet plugin of devices that several
	// nodes reach (drivers/fabric): dra mode's rights, and writing the
	// device status of its driver's claims whatever node they are
	// allocated to. The API server asks for the arbitrary-node verb where
	// a claim's allocation is not one node's, as a claim of network-
	// attached devices is (a node selector of several nodes, or none).
	ModeNetworkAttached = "network-attached"
)

// NodeNameExtra is the user extra in which the API server puts the node a
// ServiceAccount token is bound to (through a pod on it, or the Node
// itself). The API server's resourceclaims/driver check reads it too: only
// with it does the associated-node verb apply.
const NodeNameExtra = "authentication.kubernetes.io/node-name"

// Rules are the permissions of a kubelet plugin of driverName in mode:
// in dra mode, publishing its node's ResourceSlices, reading the claims
// the kubelet asks it to prepare and writing their device status on its
// node only; in network-attached mode the same, and the device status of
// claims allocated to several nodes; in every mode, reading its Node.
func Rules(driverName, mode string) []rbacv1.PolicyRule {
	var rules []rbacv1.PolicyRule
	if mode == ModeDRA || mode == ModeNetworkAttached {
		rules = append(rules,
			rbacv1.PolicyRule{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceslices"}, Verbs: []string{"list", "watch", "create", "update", "delete"}},
			rbacv1.PolicyRule{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims"}, Verbs: []string{"get"}},
			rbacv1.PolicyRule{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims/status"}, Verbs: []string{"patch"}},
			rbacv1.PolicyRule{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims/driver"}, ResourceNames: []string{driverName}, Verbs: []string{"associated-node:patch"}},
		)
	}
	if mode == ModeNetworkAttached {
		rules = append(rules, rbacv1.PolicyRule{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims/driver"}, ResourceNames: []string{driverName}, Verbs: []string{"arbitrary-node:patch"}})
	}
	return append(rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get"}})
}

// Username is how the API server names a ServiceAccount.
func Username(namespace, serviceAccount string) string {
	return "system:serviceaccount:" + namespace + ":" + serviceAccount
}

// OwnNodeSlices is the policy, named name, under which the ServiceAccount
// may write only its own driver's ResourceSlices of the node its token is
// bound to, and its binding, which denies what the policy rejects.
func OwnNodeSlices(name, namespace, serviceAccount, driverName string) (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionregistrationv1.RuleWithOperations{
						Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete},
						Rule: admissionregistrationv1.Rule{
							APIGroups:   []string{"resource.k8s.io"},
							APIVersions: []string{"*"},
							Resources:   []string{"resourceslices"},
						},
					},
				}},
			},
			MatchConditions: []admissionregistrationv1.MatchCondition{{
				Name:       "is-the-driver",
				Expression: `request.userInfo.username == "` + Username(namespace, serviceAccount) + `"`,
			}},
			Variables: []admissionregistrationv1.Variable{
				{Name: "nodeName", Expression: `has(request.userInfo.extra) && "` + NodeNameExtra + `" in request.userInfo.extra ? request.userInfo.extra["` + NodeNameExtra + `"][0] : ""`},
				{Name: "slice", Expression: `request.operation == "DELETE" ? oldObject : object`},
			},
			Validations: []admissionregistrationv1.Validation{
				{Expression: `variables.nodeName != ""`, Message: "the driver's token is not bound to a node"},
				{Expression: `has(variables.slice.spec.nodeName) && variables.slice.spec.nodeName == variables.nodeName`,
					MessageExpression: `"a plugin on node " + variables.nodeName + " may only write that node's ResourceSlices"`},
				{Expression: `variables.slice.spec.driver == "` + driverName + `"`, Message: "the plugin may only write its own driver's ResourceSlices"},
			},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	}
	return policy, binding
}
