package outcome

// AddKindForTest does at run time what adding a kind to this package's file
// does: a row in table and, when match is given, a row in classes (ahead of
// the others). The returned func takes both out again.
func AddKindForTest(name string, code int, meaning string, match func(error) bool) (Kind, func()) {
	oldTable, oldClasses := table, classes
	table = append(append([]info{}, table...), info{name: name, code: code, meaning: meaning})
	k := Kind(len(table) - 1)
	if match != nil {
		classes = append([]struct {
			kind  Kind
			match func(error) bool
		}{{k, match}}, classes...)
	}
	return k, func() { table, classes = oldTable, oldClasses }
}
