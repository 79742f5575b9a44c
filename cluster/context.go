package cluster

import "context"

type nameKey struct{}

// NewContext returns a copy of ctx that carries the name of the cluster whose work it
// is. The Provider gives it to the context of each cluster it engages, so that what is
// done with that context, such as client-go's requests, can be told apart by cluster.
func NewContext(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, nameKey{}, name)
}

// NameFromContext returns the name of the cluster that ctx carries (see NewContext),
// and whether it carries one.
func NameFromContext(ctx context.Context) (string, bool) {
	name, ok := ctx.Value(nameKey{}).(string)
	return name, ok
}
