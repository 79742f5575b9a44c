package informer

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"weak"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/klog/v2"

	"github.com/fleetwatch/fleetwatch/internal/weakmap"
)

// The clusters of a fleet mostly run the same Kubernetes version with the same CRDs, and
// serve the same discovery. A RESTMapper built from it, with the cached documents it
// was built from, held some 250 KB per cluster (BenchmarkDiscoveryHeap): most of the
// heap of a fleet of small clusters. So a Set keeps none of its own. Each reconcile reads the cluster's discovery, keeps of
// it only what resolving a name reads (discoveryView), and looks the digest of that up in
// a process-wide table (mappers), which builds a mapper for a digest it does not hold and
// keeps it while some Set holds it: a cluster that serves what another serves costs a
// pointer.

// sharedMapper is the RESTMapper of one discoveryView. It is immutable once built, and
// safe for concurrent use: a meta.DefaultRESTMapper is only written while it is built
// (restmapper.NewDiscoveryRESTMapper), and restmapper's shortcut expander keeps no
// state, reading the view's lists, which nothing writes, at each call.
type sharedMapper struct {
	// once builds mapper from view, for the first Set that asks.
	once   sync.Once
	view   discoveryView
	mapper meta.RESTMapper
}

func (m *sharedMapper) build() {
	static := staticDiscovery{view: &m.view}
	// The view's lists come with no error: the result is always complete.
	groupResources, _ := restmapper.GetAPIGroupResources(static)
	m.mapper = restmapper.NewShortcutExpander(restmapper.NewDiscoveryRESTMapper(groupResources), static, nil)
}

// discoveryDigest is the SHA-256 of a discoveryView (discoveryView.digest).
type discoveryDigest [sha256.Size]byte

// mapperTable holds the sharedMappers that Sets hold, one per digest.
type mapperTable struct {
	// entries points weakly to every sharedMapper that some Set may still hold.
	entries weakmap.Map[discoveryDigest, sharedMapper]
	// byETags indexes entries by the ETags of the documents of aggregated discovery (in
	// the order of discoveryPaths) that some Set built, or found, a mapper of.
	byETags weakmap.Map[etagPair, sharedMapper]
}

// etagPair is the ETags of a cluster's /api and /apis.
type etagPair [len(discoveryPaths)]string

// mappers is the process's table: Sets of any fleet share what their clusters serve alike.
var mappers = new(mapperTable)

// forDocs returns the sharedMapper of the documents of a cluster's aggregated discovery,
// as get does. Documents whose ETags some Set has had a mapper for already, and which
// are thus the same documents, find it without a view.
// docs are those of the first paths of discoveryPaths that were read: all of them, or
// the core group's alone (coreServes).
func (t *mapperTable) forDocs(docs []*discoveryDoc) *sharedMapper {
	var pair etagPair
	indexed := true
	for i, d := range docs {
		pair[i] = d.etag
		indexed = indexed && d.etag != ""
	}
	if indexed {
		if m := t.byETags.Load(pair); m != nil {
			m.once.Do(m.build)
			return m
		}
	}
	// The view of both documents is theirs one after the other (newDiscoveryView): the
	// core group's first.
	var v discoveryView
	for _, d := range docs {
		v.groups = append(v.groups, d.view.groups...)
		v.resources = append(v.resources, d.view.resources...)
	}
	m := t.get(v)
	if indexed {
		t.byETags.LoadOrStore(pair, func() *sharedMapper { return m })
	}
	return m
}

// get returns the sharedMapper of v: the one that Sets already hold for the same digest,
// or a new one. The caller must hold it for as long as it uses it, for the table keeps
// it for no one.
func (t *mapperTable) get(v discoveryView) *sharedMapper {
	m := t.entries.LoadOrStore(v.digest(), func() *sharedMapper { return &sharedMapper{view: v} })
	// Built outside the table's lock, so that a cluster whose discovery is new holds up
	// no other; those of the same digest wait for it.
	m.once.Do(m.build)
	return m
}

// discoveryView is what restmapper's discovery mapper and shortcut expander read of a
// cluster's discovery, in the order they read it: of the groups, their names, versions
// and preferred version; of the resources of the groups' versions, in the groups' order,
// their names, singular names, short names, kinds and scopes; no subresource (neither
// maps one, and a configured name cannot be one). It shares its strings with the
// documents it was taken from, which it lets go of.
type discoveryView struct {
	groups    []*metav1.APIGroup
	resources []*metav1.APIResourceList
}

// newDiscoveryView returns the view of what a discovery client's ServerGroupsAndResources
// returned.
//
// The resource lists come in the groups' order, as restmapper's GetAPIGroupResources
// finds them: aggregated discovery returns them in the random order of a map, and the
// shortcut expander takes the first of the resources that share a short name (events and
// events.events.k8s.io: "ev"), which is thus the one of the group first in discovery,
// and the same in every cluster.
func newDiscoveryView(groups []*metav1.APIGroup, resources []*metav1.APIResourceList) discoveryView {
	byVersion := make(map[string]*metav1.APIResourceList, len(resources))
	for _, r := range resources {
		byVersion[r.GroupVersion] = r
	}
	v := discoveryView{groups: make([]*metav1.APIGroup, 0, len(groups)), resources: []*metav1.APIResourceList{}}
	for _, g := range groups {
		group := &metav1.APIGroup{Name: g.Name, PreferredVersion: versionOnly(g.PreferredVersion)}
		for _, gv := range g.Versions {
			group.Versions = append(group.Versions, versionOnly(gv))
			r, ok := byVersion[gv.GroupVersion]
			if !ok {
				continue
			}
			list := &metav1.APIResourceList{GroupVersion: r.GroupVersion}
			for _, res := range r.APIResources {
				if strings.Contains(res.Name, "/") {
					continue
				}
				list.APIResources = append(list.APIResources, metav1.APIResource{
					Name:         res.Name,
					SingularName: res.SingularName,
					Namespaced:   res.Namespaced,
					Kind:         res.Kind,
					ShortNames:   res.ShortNames,
				})
			}
			v.resources = append(v.resources, list)
		}
		v.groups = append(v.groups, group)
	}
	return v
}

func versionOnly(v metav1.GroupVersionForDiscovery) metav1.GroupVersionForDiscovery {
	return metav1.GroupVersionForDiscovery{GroupVersion: v.GroupVersion, Version: v.Version}
}

// digest returns the SHA-256 of an encoding of v in which no two views are alike:
// counts, and strings after their lengths.
func (v discoveryView) digest() discoveryDigest {
	var b []byte
	str := func(s string) {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	b = binary.AppendUvarint(b, uint64(len(v.groups)))
	for _, g := range v.groups {
		str(g.Name)
		str(g.PreferredVersion.GroupVersion)
		str(g.PreferredVersion.Version)
		b = binary.AppendUvarint(b, uint64(len(g.Versions)))
		for _, gv := range g.Versions {
			str(gv.GroupVersion)
			str(gv.Version)
		}
	}
	b = binary.AppendUvarint(b, uint64(len(v.resources)))
	for _, r := range v.resources {
		str(r.GroupVersion)
		b = binary.AppendUvarint(b, uint64(len(r.APIResources)))
		for _, res := range r.APIResources {
			str(res.Name)
			str(res.SingularName)
			str(res.Kind)
			b = strconv.AppendBool(b, res.Namespaced)
			b = binary.AppendUvarint(b, uint64(len(res.ShortNames)))
			for _, s := range res.ShortNames {
				str(s)
			}
		}
	}
	return sha256.Sum256(b)
}

// staticDiscovery serves a discoveryView to restmapper's GetAPIGroupResources and shortcut
// expander, which call nothing of a discovery client but ServerGroupsAndResources
// (client-go's restmapper/discovery.go and shortcut.go). The other methods of the
// interface, left nil, would panic.
type staticDiscovery struct {
	discovery.DiscoveryInterface
	view *discoveryView
}

var _ discovery.DiscoveryInterface = staticDiscovery{}

// ServerGroupsAndResources returns the view's lists, which the caller must not modify.
func (s staticDiscovery) ServerGroupsAndResources() ([]*metav1.APIGroup, []*metav1.APIResourceList, error) {
	return s.view.groups, s.view.resources, nil
}

// Reading the discovery of a cluster cost more than keeping it: at 1,000 clusters, a
// fifth of the CPU of the process went to downloading and decoding the same documents for
// every cluster every DiscoveryInterval. A kube-apiserver serves each document of
// aggregated discovery with an ETag, the SHA-512 of its content, and answers 304 Not
// Modified to a request whose If-None-Match is that ETag (k8s.io/apiserver's
// endpoints/discovery/aggregated). So discover asks for /api and /apis on condition:
// with the ETag of the document that its cluster last served, or, for a cluster that
// has served none yet, of the document that some cluster last served (a kube-apiserver
// compares If-None-Match with its ETag as a whole: a list of candidates never matches).
// A 304 costs no download and no decoding, and the mapper of the pair of ETags is found
// without building a view.

// discoveryPaths are the paths of the documents of aggregated discovery: the core group
// first, as client-go's discovery client orders them.
var discoveryPaths = [2]string{"/api", "/apis"}

// discoveryAccept asks for aggregated discovery, and for the legacy documents of a
// server that does not serve it, as client-go's discovery client does.
const discoveryAccept = discovery.AcceptV2 + "," + discovery.AcceptV1

// aggregatedDiscoveryGVK is the kind of the documents of aggregated discovery.
var aggregatedDiscoveryGVK = apidiscoveryv2.SchemeGroupVersion.WithKind("APIGroupDiscoveryList")

// discoveryDoc is what a Set keeps of a document of aggregated discovery: its view and
// the ETag it came with. Those with an ETag are shared, through docs, by the Sets whose
// clusters serve them.
type discoveryDoc struct {
	etag string
	view discoveryView
	// failed holds the group versions whose resources the document does not have: those
	// of an aggregated API that did not answer (discovery.ErrGroupDiscoveryFailed).
	failed map[schema.GroupVersion]error
}

// docKey is a document, by the index of its path in discoveryPaths and its ETag.
type docKey struct {
	path int
	etag string
}

// docTable holds the discoveryDocs that Sets hold, by ETag.
type docTable struct {
	// entries points weakly to every document that some Set may still hold.
	entries weakmap.Map[docKey, discoveryDoc]
	// mu guards latest.
	mu sync.Mutex
	// latest is, by path, the document that a cluster served last: the one that a
	// cluster that has served none yet is asked whether it serves.
	latest [len(discoveryPaths)]weak.Pointer[discoveryDoc]
}

// docs is the process's table of documents.
var docs = new(docTable)

// candidate returns the document of path that a cluster served last, or nil.
func (t *docTable) candidate(path int) *discoveryDoc {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.latest[path].Value()
}

// served records that a cluster served d at path, and returns the document that Sets
// share for d's ETag: d, or the one that another Set downloaded already.
func (t *docTable) served(path int, d *discoveryDoc) *discoveryDoc {
	d = t.entries.LoadOrStore(docKey{path: path, etag: d.etag}, func() *discoveryDoc { return d })
	t.mu.Lock()
	t.latest[path] = weak.Make(d)
	t.mu.Unlock()
	return d
}

// sharedETag reports whether etag, as a server sent it, may stand for the content of a
// document in any cluster: a strong ETag as long as a hash, as a kube-apiserver's. A
// server whose ETags are versions of its own, which another cluster's could equal, is
// asked unconditionally.
func sharedETag(etag string) bool {
	return len(etag) >= 2+32 && etag[0] == '"' && etag[len(etag)-1] == '"'
}

// discover reads the cluster's discovery, and returns the mapper of what it serves,
// shared with the Sets whose clusters serve the same. A partial result (some group
// versions failed, discovery.ErrGroupDiscoveryFailed) is used as restmapper's
// GetAPIGroupResources uses it: the resources of the failed versions are not found.
//
// When every name of names is the plural name of a resource of the core group, /apis
// is not read (coreServes): the names resolve to the core group's resources whatever
// the other groups serve, as kubectl resolves them, and a cluster of pods and
// configmaps costs its apiserver one discovery request, not two.
//
// It is called by reconcile only, which runs on Start's goroutine.
func (s *Set) discover(ctx context.Context, names []string) (meta.RESTMapper, error) {
	var held [len(discoveryPaths)]*discoveryDoc
	read := len(discoveryPaths)
	for i := range discoveryPaths {
		if i > 0 && coreServes(held[0], names) {
			read = i
			break
		}
		d, ok, err := s.readDiscoveryDoc(ctx, i)
		if err != nil {
			return nil, fmt.Errorf("reading discovery: %w", err)
		}
		if !ok {
			return s.discoverUnconditionally(ctx)
		}
		held[i] = d
	}
	failed := map[schema.GroupVersion]error{}
	for _, d := range held[:read] {
		maps.Copy(failed, d.failed)
	}
	if len(failed) > 0 {
		klog.FromContext(ctx).V(1).Info("Discovery is partial", "err", &discovery.ErrGroupDiscoveryFailed{Groups: failed})
	}
	// Held until the next discovery replaces them, so that they stay shared meanwhile. A
	// document without an ETag is not: no one will ask for it.
	s.mapper = mappers.forDocs(held[:read])
	for i, d := range held {
		if d != nil && d.etag == "" {
			held[i] = nil
		}
	}
	s.docs = held
	return s.mapper.mapper, nil
}

// coreServes reports whether core, the document of the core group (/api), serves a
// resource of each of names by its plural name, names without a group or version:
// then the names resolve to those resources, the core group's being first in
// discovery, and the other groups' document is not needed. Singular and short names,
// which another group's resources may claim, are not taken as such. A name is the
// core group's so even where a CRD claims it as a short name of its own, which
// resolving it against every group would expand to the CRD's resource.
func coreServes(core *discoveryDoc, names []string) bool {
	if core == nil || len(names) == 0 {
		return false
	}
	for _, name := range names {
		if strings.Contains(name, ".") || !slices.ContainsFunc(core.view.resources, func(l *metav1.APIResourceList) bool {
			return l.GroupVersion == "v1" && slices.ContainsFunc(l.APIResources, func(r metav1.APIResource) bool { return r.Name == name })
		}) {
			return false
		}
	}
	return true
}

// builtinKinds are the resources that every Kubernetes release from 1.23 on (the first
// with autoscaling/v2) serves at the same group and version, and that can be listed
// and watched, by plural name: the core group's (/api, v1) and the built-in groups'
// whose only stable version is that one, with their kinds and whether they are
// namespaced. What discovery resolves each name to on any such cluster: a name without
// a group that the core group serves is the core group's, whatever another group
// claims (coreServes), and a built-in group comes before any CRD's or aggregated API's
// in discovery's order (the priority of the built-in groups), so a CRD of the same
// plural name does not take it either. Not here: names that two built-in groups serve
// (events, core's), resources whose preferred version changed since 1.23, and those
// served only by optional components.
var builtinKinds = map[string]builtinKind{
	"configmaps":             {"", "v1", "ConfigMap", true},
	"endpoints":              {"", "v1", "Endpoints", true},
	"events":                 {"", "v1", "Event", true},
	"limitranges":            {"", "v1", "LimitRange", true},
	"namespaces":             {"", "v1", "Namespace", false},
	"nodes":                  {"", "v1", "Node", false},
	"persistentvolumeclaims": {"", "v1", "PersistentVolumeClaim", true},
	"persistentvolumes":      {"", "v1", "PersistentVolume", false},
	"pods":                   {"", "v1", "Pod", true},
	"podtemplates":           {"", "v1", "PodTemplate", true},
	"replicationcontrollers": {"", "v1", "ReplicationController", true},
	"resourcequotas":         {"", "v1", "ResourceQuota", true},
	"secrets":                {"", "v1", "Secret", true},
	"serviceaccounts":        {"", "v1", "ServiceAccount", true},
	"services":               {"", "v1", "Service", true},

	"controllerrevisions":             {"apps", "v1", "ControllerRevision", true},
	"daemonsets":                      {"apps", "v1", "DaemonSet", true},
	"deployments":                     {"apps", "v1", "Deployment", true},
	"replicasets":                     {"apps", "v1", "ReplicaSet", true},
	"statefulsets":                    {"apps", "v1", "StatefulSet", true},
	"cronjobs":                        {"batch", "v1", "CronJob", true},
	"jobs":                            {"batch", "v1", "Job", true},
	"horizontalpodautoscalers":        {"autoscaling", "v2", "HorizontalPodAutoscaler", true},
	"leases":                          {"coordination.k8s.io", "v1", "Lease", true},
	"endpointslices":                  {"discovery.k8s.io", "v1", "EndpointSlice", true},
	"ingressclasses":                  {"networking.k8s.io", "v1", "IngressClass", false},
	"ingresses":                       {"networking.k8s.io", "v1", "Ingress", true},
	"networkpolicies":                 {"networking.k8s.io", "v1", "NetworkPolicy", true},
	"poddisruptionbudgets":            {"policy", "v1", "PodDisruptionBudget", true},
	"clusterrolebindings":             {"rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", false},
	"clusterroles":                    {"rbac.authorization.k8s.io", "v1", "ClusterRole", false},
	"rolebindings":                    {"rbac.authorization.k8s.io", "v1", "RoleBinding", true},
	"roles":                           {"rbac.authorization.k8s.io", "v1", "Role", true},
	"priorityclasses":                 {"scheduling.k8s.io", "v1", "PriorityClass", false},
	"csidrivers":                      {"storage.k8s.io", "v1", "CSIDriver", false},
	"csinodes":                        {"storage.k8s.io", "v1", "CSINode", false},
	"storageclasses":                  {"storage.k8s.io", "v1", "StorageClass", false},
	"volumeattachments":               {"storage.k8s.io", "v1", "VolumeAttachment", false},
	"customresourcedefinitions":       {"apiextensions.k8s.io", "v1", "CustomResourceDefinition", false},
	"mutatingwebhookconfigurations":   {"admissionregistration.k8s.io", "v1", "MutatingWebhookConfiguration", false},
	"validatingwebhookconfigurations": {"admissionregistration.k8s.io", "v1", "ValidatingWebhookConfiguration", false},
	"runtimeclasses":                  {"node.k8s.io", "v1", "RuntimeClass", false},
	"certificatesigningrequests":      {"certificates.k8s.io", "v1", "CertificateSigningRequest", false},
}

// builtinKind is what a name of builtinKinds resolves to.
type builtinKind struct {
	group, version, kind string
	namespaced           bool
}

// builtinMapper resolves the names of builtinKinds, by plural name and as
// plural.group, and no other.
var builtinMapper = func() meta.RESTMapper {
	var gvs []schema.GroupVersion
	for _, k := range builtinKinds {
		if gv := (schema.GroupVersion{Group: k.group, Version: k.version}); !slices.Contains(gvs, gv) {
			gvs = append(gvs, gv)
		}
	}
	m := meta.NewDefaultRESTMapper(gvs)
	for name, k := range builtinKinds {
		scope := meta.RESTScopeRoot
		if k.namespaced {
			scope = meta.RESTScopeNamespace
		}
		gvk := schema.GroupVersionKind{Group: k.group, Version: k.version, Kind: k.kind}
		m.AddSpecific(gvk, gvk.GroupVersion().WithResource(name), gvk.GroupVersion().WithResource(strings.ToLower(k.kind)), scope)
	}
	return m
}()

// builtinOnly reports whether every name is one of builtinKinds, by its plural name or
// as plural.group (deployments.apps): then a Set's first reconcile resolves them without
// reading discovery, as typed informers do, and lists at once. Each cluster's start so
// costs its apiserver a request less, which at thousands of clusters is a tenth of the
// apiservers' work of a cold start, and a round trip less before its list. Discovery is
// read at the next reconcile (Options.DiscoveryInterval later, or at once if a list
// finds the resource missing), and a name that it resolves otherwise is restarted
// with its mapping.
func builtinOnly(names []string) bool {
	for _, name := range names {
		if !isBuiltin(name) {
			return false
		}
	}
	return len(names) > 0
}

// isBuiltin reports whether name is a name of builtinKinds, or one as plural.group.
func isBuiltin(name string) bool {
	plural, group, dotted := strings.Cut(name, ".")
	k, ok := builtinKinds[plural]
	return ok && (!dotted || k.group != "" && k.group == group)
}

// discoveryClient returns the Set's discovery client, made at the first call. It is
// called by reconcile only.
func (s *Set) discoveryClient() (*discovery.DiscoveryClient, error) {
	if s.discovery == nil {
		dc, err := discovery.NewDiscoveryClientForConfig(s.discoveryConfig)
		if err != nil {
			return nil, err
		}
		s.discovery = dc
	}
	return s.discovery, nil
}

// discoverUnconditionally is discover for a server that does not serve aggregated
// discovery, or answered with an error: client-go's discovery client reads it, or
// reports the error, as it always did.
func (s *Set) discoverUnconditionally(ctx context.Context) (meta.RESTMapper, error) {
	s.docs = [len(discoveryPaths)]*discoveryDoc{}
	// Not the client's own method, which asks again for a partial result: one read per
	// reconcile, two requests for aggregated discovery.
	dc, err := s.discoveryClient()
	if err != nil {
		return nil, fmt.Errorf("reading discovery: %w", err)
	}
	groups, resources, err := discovery.ServerGroupsAndResourcesWithContext(ctx, dc)
	if err != nil {
		if groups == nil || resources == nil {
			return nil, fmt.Errorf("reading discovery: %w", err)
		}
		klog.FromContext(ctx).V(1).Info("Discovery is partial", "err", err)
	}
	// Held until the next discovery replaces it, so that it stays shared meanwhile.
	s.mapper = mappers.get(newDiscoveryView(groups, resources))
	return s.mapper.mapper, nil
}

// readDiscoveryDoc reads the document at discoveryPaths[path] through the cluster's
// discovery client, on condition that it is not the one that the cluster last served or,
// for a cluster that has served none, the one that a cluster served last. It returns
// false, and no error, if the server answered with something else than a document of
// aggregated discovery or a 304.
func (s *Set) readDiscoveryDoc(ctx context.Context, path int) (*discoveryDoc, bool, error) {
	dc, err := s.discoveryClient()
	if err != nil {
		return nil, false, err
	}
	rc, ok := dc.RESTClient().(*rest.RESTClient)
	if !ok {
		return nil, false, nil
	}
	known := s.docs[path]
	if known == nil {
		known = docs.candidate(path)
	}
	// The request goes through the client's own http.Client, its credentials and
	// stopAware, and its timeout; rest.Result would hide the ETag.
	u := rc.Get().AbsPath(discoveryPaths[path]).URL()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, false, err
	}
	req.Header.Set("Accept", discoveryAccept)
	if known != nil {
		req.Header.Set("If-None-Match", known.etag)
	}
	resp, err := rc.Client.Do(req)
	if err != nil {
		return nil, false, err
	}
	defer func() {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}()
	etag := resp.Header.Get("ETag")
	if !sharedETag(etag) {
		etag = ""
	}
	switch {
	case resp.StatusCode == http.StatusNotModified && known != nil:
		return docs.served(path, known), true, nil
	case resp.StatusCode != http.StatusOK:
		return nil, false, nil
	}
	if aggregated, _ := discovery.ContentTypeIsGVK(resp.Header.Get("Content-Type"), aggregatedDiscoveryGVK); !aggregated {
		return nil, false, nil
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, false, err
	}
	var list apidiscoveryv2.APIGroupDiscoveryList
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, false, fmt.Errorf("decoding %s: %w", discoveryPaths[path], err)
	}
	groupList, byVersion, failed := discovery.SplitGroupsAndResources(list)
	groups := make([]*metav1.APIGroup, len(groupList.Groups))
	for i := range groupList.Groups {
		groups[i] = &groupList.Groups[i]
	}
	d := &discoveryDoc{etag: etag, view: newDiscoveryView(groups, slices.Collect(maps.Values(byVersion))), failed: failed}
	if etag == "" {
		return d, true, nil
	}
	return docs.served(path, d), true, nil
}
