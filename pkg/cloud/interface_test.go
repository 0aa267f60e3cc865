package cloud

import (
	"reflect"
	"strings"
	"testing"
)

// TestInterfaceSpeaksTheDriversTerms walks every parameter and result of
// the Cloud interface, down through struct fields, pointers, slices and
// maps, and fails on any type from the AWS SDK or smithy: the driver layer
// must be readable and testable without knowing the EC2 API.
func TestInterfaceSpeaksTheDriversTerms(t *testing.T) {
	forbidden := []string{"github.com/aws/"}
	seen := map[reflect.Type]bool{}
	var walk func(path string, typ reflect.Type)
	walk = func(path string, typ reflect.Type) {
		if seen[typ] {
			return
		}
		seen[typ] = true
		for _, prefix := range forbidden {
			if strings.HasPrefix(typ.PkgPath(), prefix) {
				t.Errorf("%s is %s from %s", path, typ, typ.PkgPath())
			}
		}
		switch typ.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Array:
			walk(path, typ.Elem())
		case reflect.Map:
			walk(path+" key", typ.Key())
			walk(path, typ.Elem())
		case reflect.Struct:
			for i := range typ.NumField() {
				f := typ.Field(i)
				walk(path+"."+f.Name, f.Type)
			}
		}
	}
	iface := reflect.TypeFor[Cloud]()
	if iface.NumMethod() == 0 {
		t.Fatal("Cloud has no methods")
	}
	for i := range iface.NumMethod() {
		m := iface.Method(i)
		for j := range m.Type.NumIn() {
			walk(m.Name+" parameter", m.Type.In(j))
		}
		for j := range m.Type.NumOut() {
			walk(m.Name+" result", m.Type.Out(j))
		}
	}
	// The walk must have reached the option and result structs, or it
	// proves nothing.
	for _, typ := range []reflect.Type{reflect.TypeFor[CreateVolumeOptions](), reflect.TypeFor[Volume](), reflect.TypeFor[Attachment](), reflect.TypeFor[SnapshotPage]()} {
		if !seen[typ] {
			t.Errorf("the walk never reached %s", typ)
		}
	}
}
