package server

import (
	"fmt"
	"net/url"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// routeKind says what a path addresses.
type routeKind int

const (
	routeNotFound     routeKind = iota
	routeAPIVersions            // /api
	routeAPIGroupList           // /apis
	routeAPIGroup               // /apis/{group}
	routeResourceList           // /api/{version}, /apis/{group}/{version}
	routeResource               // a collection or an object of a resource
	routeVersion                // /clusters/{cluster}/version
	routeOpenAPI                // /clusters/{cluster}/openapi/v2, /openapi/v3[/...]
)

// route is a parsed API path.
type route struct {
	kind routeKind
	// cluster is the cluster prefix: a cluster name, allClusters, or "" for the paths
	// outside /clusters/, which serve only fleetwatch.io.
	cluster string
	group   string
	version string
	// For routeResource: the namespace (hasNamespace if the path names one), the
	// resource, the object name (hasName), and a subresource, which is never served.
	namespace    string
	hasNamespace bool
	resource     string
	name         string
	hasName      bool
	subresource  string
	// openAPI is the OpenAPI path of a cluster, for routeOpenAPI.
	openAPI string
}

// markers are the path segments that end a cluster name that was sent unescaped.
var markers = []string{"api", "apis", "version", "openapi"}

// parseRoute parses an escaped request path. Each segment is unescaped on its own, so a
// cluster name sent as arn:aws:eks:eu-west-1:1:cluster%2Fprod keeps its '/'. Clients
// that do not escape (client-go rebuilds request paths from the unescaped form, so
// kubectl --server .../clusters/a%2Fb sends /clusters/a/b/api/...) are understood too:
// the cluster name runs up to the first segment that is api, apis, version or openapi.
// A cluster whose name has such a segment must then be asked for escaped.
func parseRoute(escapedPath string) (route, error) {
	raw := strings.Split(strings.Trim(escapedPath, "/"), "/")
	segs := make([]string, len(raw))
	for i, s := range raw {
		u, err := url.PathUnescape(s)
		if err != nil {
			return route{}, fmt.Errorf("path segment %q: %w", s, err)
		}
		segs[i] = u
	}
	var rt route
	if len(segs) >= 2 && segs[0] == "clusters" {
		end := 2
		for end < len(segs) && !slices.Contains(markers, segs[end]) {
			end++
		}
		if end == len(segs) {
			end = 2 // no marker: /clusters/{cluster}[/...] with an unknown rest
		}
		rt.cluster = strings.Join(segs[1:end], "/")
		if rt.cluster == "" {
			return route{}, nil
		}
		segs = segs[end:]
		if len(segs) == 1 && segs[0] == "version" {
			rt.kind = routeVersion
			return rt, nil
		}
		if p, ok := openAPIPath(segs); ok {
			rt.kind, rt.openAPI = routeOpenAPI, p
			return rt, nil
		}
	}
	switch {
	case len(segs) == 0:
		return route{}, nil
	case segs[0] == "api":
		switch len(segs) {
		case 1:
			rt.kind = routeAPIVersions
		case 2:
			rt.kind, rt.version = routeResourceList, segs[1]
		default:
			rt.version = segs[1]
			parseResourcePath(&rt, segs[2:])
		}
	case segs[0] == "apis":
		switch len(segs) {
		case 1:
			rt.kind = routeAPIGroupList
		case 2:
			rt.kind, rt.group = routeAPIGroup, segs[1]
		case 3:
			rt.kind, rt.group, rt.version = routeResourceList, segs[1], segs[2]
		default:
			rt.group, rt.version = segs[1], segs[2]
			parseResourcePath(&rt, segs[3:])
		}
	}
	if rt.kind == routeNotFound || rt.version == "" && (rt.kind == routeResourceList || rt.kind == routeResource) {
		return route{}, nil
	}
	return rt, nil
}

// parseResourcePath parses what follows a group version: [namespaces/{ns}/]{resource}
// [/{name}[/{subresource}...]]. namespaces/{ns} alone is the Namespace object ns.
func parseResourcePath(rt *route, segs []string) {
	if len(segs) >= 3 && segs[0] == "namespaces" {
		rt.namespace, rt.hasNamespace = segs[1], true
		segs = segs[2:]
	}
	if slices.Contains(segs, "") {
		return
	}
	rt.kind = routeResource
	rt.resource = segs[0]
	if len(segs) >= 2 {
		rt.name, rt.hasName = segs[1], true
	}
	if len(segs) >= 3 {
		rt.subresource = strings.Join(segs[2:], "/")
	}
}

func (rt route) groupVersion() schema.GroupVersion {
	return schema.GroupVersion{Group: rt.group, Version: rt.version}
}
