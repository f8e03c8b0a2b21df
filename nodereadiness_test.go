package health

import (
	"bytes"
	"context"
	"errors"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

// nodeReadinessDoc is what TestNodeReadinessReporterURL reads from the
// manifests of docs/node-readiness.md: the NodeReadinessRule, the
// reporter's DaemonSet and the toleration the agent's DaemonSet needs.
type nodeReadinessDoc struct {
	rules      []nrRule
	reporters  []nrDaemonSet
	toleration []nrToleration
}

type nrRule struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Spec       struct {
		Conditions []struct {
			Type           string `yaml:"type"`
			RequiredStatus string `yaml:"requiredStatus"`
		} `yaml:"conditions"`
		Taint struct {
			Key    string `yaml:"key"`
			Effect string `yaml:"effect"`
		} `yaml:"taint"`
		EnforcementMode string         `yaml:"enforcementMode"`
		NodeSelector    map[string]any `yaml:"nodeSelector"`
	} `yaml:"spec"`
}

type nrDaemonSet struct {
	Kind string `yaml:"kind"`
	Spec struct {
		Template struct {
			Spec struct {
				HostNetwork bool `yaml:"hostNetwork"`
				Containers  []struct {
					Image string `yaml:"image"`
					Env   []struct {
						Name      string `yaml:"name"`
						Value     string `yaml:"value"`
						ValueFrom *struct {
							FieldRef struct {
								FieldPath string `yaml:"fieldPath"`
							} `yaml:"fieldRef"`
						} `yaml:"valueFrom"`
					} `yaml:"env"`
				} `yaml:"containers"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type nrToleration struct {
	Key      string `yaml:"key"`
	Operator string `yaml:"operator"`
	Effect   string `yaml:"effect"`
}

// readNodeReadinessDoc parses every document of every yaml block of
// docs/node-readiness.md.
func readNodeReadinessDoc(t *testing.T) nodeReadinessDoc {
	t.Helper()
	page, err := os.ReadFile("docs/node-readiness.md")
	require.NoError(t, err)
	var doc nodeReadinessDoc
	for _, block := range regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllSubmatch(page, -1) {
		dec := yaml.NewDecoder(bytes.NewReader(block[1]))
		for {
			var node yaml.Node
			err := dec.Decode(&node)
			if errors.Is(err, io.EOF) {
				break
			}
			require.NoError(t, err, "docs/node-readiness.md: a yaml block that does not parse:\n%s", block[1])
			var head struct {
				Kind        string         `yaml:"kind"`
				Tolerations []nrToleration `yaml:"tolerations"`
			}
			require.NoError(t, node.Decode(&head))
			switch {
			case head.Kind == "NodeReadinessRule":
				var r nrRule
				require.NoError(t, node.Decode(&r))
				doc.rules = append(doc.rules, r)
			case head.Kind == "DaemonSet":
				var d nrDaemonSet
				require.NoError(t, node.Decode(&d))
				doc.reporters = append(doc.reporters, d)
			case head.Kind == "" && head.Tolerations != nil:
				doc.toleration = append(doc.toleration, head.Tolerations...)
			}
		}
	}
	return doc
}

// TestNodeReadinessReporterURL keeps docs/node-readiness.md's manifests
// true to this package: the node-readiness-controller's reporter must poll
// the agent's loopback listener on a URL that follows the data plane
// alone, so that a control-plane outage, which leaves registration and
// event delivery unmet on every node at once, never taints the fleet. It
// takes the URL the reporter's DaemonSet is given, checks the rule around
// it (the condition the reporter writes, a NoSchedule taint, continuous,
// tolerated by the agent), and then asks a real Server, served on
// loopback, for that URL's path and query in each readiness state, as the
// reporter's HTTP client would: a 2xx answer is the condition True, any
// other its False.
func TestNodeReadinessReporterURL(t *testing.T) {
	doc := readNodeReadinessDoc(t)

	require.Len(t, doc.reporters, 1, "docs/node-readiness.md has one DaemonSet: the reporter's")
	pod := doc.reporters[0].Spec.Template.Spec
	assert.True(t, pod.HostNetwork, "the reporter reaches the agent's loopback only on the node's network")
	require.Len(t, pod.Containers, 1)
	reporter := pod.Containers[0]
	assert.Contains(t, reporter.Image, "registry.k8s.io/node-readiness-controller/node-readiness-reporter:")
	env := map[string]string{}
	for _, e := range reporter.Env {
		if e.ValueFrom != nil {
			env[e.Name] = "fieldRef:" + e.ValueFrom.FieldRef.FieldPath
			continue
		}
		env[e.Name] = e.Value
	}
	assert.Equal(t, "fieldRef:spec.nodeName", env["NODE_NAME"], "the reporter writes its own node's condition")
	require.NotEmpty(t, env["CONDITION_TYPE"])
	endpoint := env["CHECK_ENDPOINT"]
	u, err := url.Parse(endpoint)
	require.NoError(t, err, "CHECK_ENDPOINT %q", endpoint)
	assert.Equal(t, "http", u.Scheme)
	assert.Equal(t, DefaultListen, u.Host, "a literal loopback address, the one the agent binds: never localhost")
	assert.Equal(t, "/readyz", u.Path)
	excluded := u.Query()["exclude"]
	slices.Sort(excluded)
	assert.Equal(t, []string{"event-delivery", "registration", "subsystems"}, excluded,
		"the data plane alone: registration, event delivery and the subsystems left out, the data-plane rows kept")
	assert.Equal(t, []string{"exclude"}, slices.Collect(maps.Keys(u.Query())),
		"no other query key: verbose would change the body the condition's message carries")

	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	assert.Contains(t, string(readme), endpoint, "README.md's Deploying section names the same URL")

	require.Len(t, doc.rules, 1, "docs/node-readiness.md has one NodeReadinessRule")
	rule := doc.rules[0]
	assert.Equal(t, "readiness.node.x-k8s.io/v1alpha1", rule.APIVersion)
	assert.Equal(t, "continuous", rule.Spec.EnforcementMode, "bootstrap-only never re-adds the taint when the data plane is lost later")
	assert.Equal(t, "NoSchedule", rule.Spec.Taint.Effect, "NoExecute would evict the node's pods on one failed poll")
	assert.True(t, strings.HasPrefix(rule.Spec.Taint.Key, "readiness.k8s.io/"), "the controller's schema wants the readiness.k8s.io/ prefix: %q", rule.Spec.Taint.Key)
	assert.NotEmpty(t, rule.Spec.NodeSelector, "nodeSelector is required")
	require.Len(t, rule.Spec.Conditions, 1)
	assert.Equal(t, env["CONDITION_TYPE"], rule.Spec.Conditions[0].Type, "the rule follows the condition the reporter writes")
	assert.Equal(t, "True", rule.Spec.Conditions[0].RequiredStatus)
	assert.Contains(t, doc.toleration, nrToleration{Key: rule.Spec.Taint.Key, Operator: "Exists", Effect: "NoSchedule"},
		"the agent tolerates the taint, or on a node registered with it the agent never starts and the taint is never lifted")

	// What the URL answers in each state. The reporter's client: a GET
	// with a 10 s timeout, on a fresh connection.
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	const notConfigured, pending, lost, stalled = "not ready: data plane not configured\n",
		"not ready: data plane check pending\n", "not ready: data plane lost\n", "not ready: data plane check stalled\n"
	for _, tc := range []struct {
		name   string
		set    func(t *testing.T, s *Server)
		status int
		body   string
	}{
		{"a new server: registration pending, data plane not configured", func(*testing.T, *Server) {}, 503, notConfigured},
		{"registered, data plane not configured", func(_ *testing.T, s *Server) { s.SetRegistered() }, 503, notConfigured},
		{"data plane configured, registration pending", func(_ *testing.T, s *Server) { s.SetDataPlaneReady() }, 200, "ok\n"},
		{"data plane configured; registration pending, delivery stopped and degraded, a subsystem stopped, a loop unresponsive", func(t *testing.T, s *Server) {
			s.SetDataPlaneReady()
			s.SetDeliveryStopped()
			s.SetDeliveryMode(DeliveryModeDegradedPolling)
			s.SetSubsystemStopped(plantedSubsystem)
			t.Cleanup(s.Watch(plantedSubsystem, time.Hour).Stop)
		}, 200, "ok\n"},
		{"a check set, no verdict yet, registration pending", func(_ *testing.T, s *Server) {
			s.SetDataPlaneReady()
			setCheckVerdict(s, checkVerdict{pending: true})
		}, 503, pending},
		{"a failing check, registration pending and delivery stopped", func(t *testing.T, s *Server) {
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			s.SetDeliveryStopped()
			s.SetDataPlaneCheck(ctx, failingCheck(errPlantedCheck))
			s.SetDataPlaneReady()
			eventually(t, func() bool { return slices.Contains(s.Status().Unmet, ErrDataPlaneLost) }, "the check's first verdict")
		}, 503, lost},
		{"a stalled check, delivery degraded", func(_ *testing.T, s *Server) {
			setLatches(s)
			setCheckVerdict(s, checkVerdict{stalled: true})
			s.SetDeliveryMode(DeliveryModeDegradedPolling)
		}, 503, stalled},
		{"a passing check; registration pending, a loop unresponsive", func(t *testing.T, s *Server) {
			s.SetDataPlaneReady()
			setCheckVerdict(s, checkVerdict{})
			t.Cleanup(s.Watch(plantedSubsystem, time.Hour).Stop)
		}, 200, "ok\n"},
		{"everything met", func(_ *testing.T, s *Server) { setLatches(s); setCheckVerdict(s, checkVerdict{}) }, 200, "ok\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newTestServer(t)
			tc.set(t, s)
			addr, _ := startServing(t, s)
			target := *u
			target.Host = addr
			resp, err := client.Get(target.String())
			require.NoError(t, err)
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.NoError(t, err)
			assert.Equal(t, tc.status, resp.StatusCode, "%s: the reporter's URL must answer as /readyz without the rows of registration, event-delivery and subsystems (?exclude=)", endpoint)
			assert.Equal(t, tc.body, string(body), "%s: the body the condition's message would carry", endpoint)
		})
	}
}
