//! What a CRD validation rule costs, as kube-apiserver reckons it.
//!
//! A rule's *estimated* cost is worked out when its CRD is written, from the largest values its
//! schema allows (`maxLength`, `maxItems`, `maxProperties`, else the most a 3 MiB request could
//! hold), with CEL's cost model: 1 per identifier and field selection, 0 per constant, 10 per
//! list and 30 per map created, a comprehension's body times the size of its range, string
//! functions by the lengths they traverse. A rule whose estimate, times the number of times
//! it can run in one object, exceeds 10,000,000 is refused, and so is a schema whose rules
//! exceed 100,000,000 together; the messages are kube-apiserver's.
//!
//! At run time the same model is worked out over the object's *actual* sizes before a rule is
//! evaluated. That is what a rule is charged: a call over 1,000,000 is not evaluated (upstream
//! cancels it once its running cost passes that), and one request's rules share a budget of
//! 10,000,000. Upstream counts the steps it evaluates; the estimate over actual sizes is an
//! upper bound of that count (it assumes no short circuit), so Flotilla never starts an
//! evaluation that could run past its limit, at the price of refusing earlier than upstream
//! when a short circuit would have saved the work.

use std::collections::{BTreeMap, HashMap};

use cel::IdedExpr;
use cel::common::ast::{EntryExpr, Expr, LiteralValue, operators};
use serde_json::Value;

use crate::structural::Schema;

/// The most one evaluation of a rule may cost (celconfig.PerCallLimit).
pub const PER_CALL_LIMIT: u64 = 1_000_000;
/// The most all rules of one request may cost together (celconfig.RuntimeCELCostBudget).
pub const RUNTIME_BUDGET: u64 = 10_000_000;
/// The most one rule's estimate, times its cardinality, may be (StaticEstimatedCostLimit).
pub const ESTIMATED_COST_LIMIT: u64 = 10_000_000;
/// The most a schema's rule estimates may be together (StaticEstimatedCRDCostLimit).
pub const ESTIMATED_CRD_COST_LIMIT: u64 = 100_000_000;
/// The largest request body, which bounds what an unbounded list, map or string can hold.
const MAX_REQUEST_SIZE_BYTES: u64 = 3 * 1024 * 1024;

const STRING_TRAVERSAL_FACTOR: f64 = 0.1;
const REGEX_LENGTH_FACTOR: f64 = 0.25;
const LIST_CREATE_COST: u64 = 10;
const MAP_CREATE_COST: u64 = 30;
const STRUCT_CREATE_COST: u64 = 40;

/// A range of sizes or costs, saturating at `u64::MAX`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Est {
    pub min: u64,
    pub max: u64,
}

impl Est {
    const UNKNOWN: Est = Est { min: 0, max: u64::MAX };

    fn fixed(v: u64) -> Est {
        Est { min: v, max: v }
    }

    fn add(self, o: Est) -> Est {
        Est { min: self.min.saturating_add(o.min), max: self.max.saturating_add(o.max) }
    }

    fn mul(self, o: Est) -> Est {
        Est { min: self.min.saturating_mul(o.min), max: self.max.saturating_mul(o.max) }
    }

    fn factor(self, f: f64) -> Est {
        Est { min: by_factor(self.min, f), max: by_factor(self.max, f) }
    }

    fn union(self, o: Est) -> Est {
        Est { min: self.min.min(o.min), max: self.max.max(o.max) }
    }
}

/// `x * f` rounded up, saturating.
fn by_factor(x: u64, f: f64) -> u64 {
    let product = (x as f64 * f).ceil();
    if product >= 18_446_744_073_709_551_616.0 { u64::MAX } else { product as u64 }
}

/// What CEL sees of a schema node (kube-apiserver's DeclType): its kind, the most elements it
/// can have (characters of a string, items of a list, entries of a map) and the fewest bytes
/// it takes in JSON.
#[derive(Clone, Debug)]
pub struct Decl {
    pub kind: Kind,
    pub max_elements: u64,
    pub min_size: u64,
}

#[derive(Clone, Debug)]
pub enum Kind {
    Object(BTreeMap<String, Decl>),
    List(Box<Decl>),
    /// Keys are strings.
    Map(Box<Decl>),
    Str,
    Bytes,
    Int,
    Double,
    Bool,
    Dyn,
    Duration,
    Timestamp,
}

impl Decl {
    fn simple(kind: Kind, min_size: u64) -> Decl {
        Decl { kind, max_elements: 0, min_size }
    }

    /// The declaration of `s`; `root` for a resource's root (and an embedded resource), which
    /// gains `apiVersion`, `kind` and `metadata.name`/`generateName`. None for a node CEL
    /// cannot see (no type).
    pub fn of(s: &Schema, root: bool) -> Option<Decl> {
        let unbounded_string = MAX_REQUEST_SIZE_BYTES - 2;
        if s.int_or_string {
            let max = s.max_length.map_or(unbounded_string, |m| m * 4);
            return Some(Decl { kind: Kind::Dyn, max_elements: max, min_size: 1 });
        }
        match s.type_.as_deref()? {
            "array" => {
                let items = Decl::of(s.items.as_deref()?, s.items.as_deref()?.embedded_resource)?;
                let max = s.max_items.unwrap_or((MAX_REQUEST_SIZE_BYTES - 2) / (items.min_size + 1));
                Some(Decl { kind: Kind::List(Box::new(items)), max_elements: max, min_size: 2 })
            }
            "object" => {
                if let Some(ap) = s.additional_properties.as_deref() {
                    let values = Decl::of(ap, ap.embedded_resource)?;
                    let max = s.max_properties.unwrap_or((MAX_REQUEST_SIZE_BYTES - 2) / (values.min_size + 6));
                    return Some(Decl { kind: Kind::Map(Box::new(values)), max_elements: max, min_size: 2 });
                }
                let mut fields = BTreeMap::new();
                let mut min_size = 2;
                for (name, prop) in &s.properties {
                    if let Some(d) = Decl::of(prop, prop.embedded_resource) {
                        if s.required.contains(name) && prop.default.is_none() {
                            min_size += name.len() as u64 + d.min_size + 4;
                        }
                        fields.insert(name.clone(), d);
                    }
                }
                if root {
                    let string = || Decl { kind: Kind::Str, max_elements: unbounded_string, min_size: 2 };
                    let meta_has = |f: &str| matches!(fields.get("metadata"), Some(Decl { kind: Kind::Object(m), .. }) if m.contains_key(f));
                    let complete = fields.contains_key("kind") && fields.contains_key("apiVersion") && meta_has("name") && meta_has("generateName");
                    if !complete {
                        fields.insert("kind".into(), string());
                        fields.insert("apiVersion".into(), string());
                        let meta = BTreeMap::from([("name".to_string(), string()), ("generateName".to_string(), string())]);
                        fields.insert("metadata".into(), Decl::simple(Kind::Object(meta), 2));
                    }
                }
                Some(Decl::simple(Kind::Object(fields), min_size))
            }
            "string" => {
                let (kind, min, max) = match s.format.as_deref() {
                    Some("byte") => (Kind::Bytes, 2, s.max_length.unwrap_or(unbounded_string)),
                    Some("duration") => (Kind::Duration, 3, 32),
                    Some("date") => (Kind::Timestamp, 12, 12),
                    Some("date-time") => (Kind::Timestamp, 21, 32),
                    _ => {
                        let longest_enum = || s.enum_.iter().filter_map(Value::as_str).map(|e| e.len() as u64).max().unwrap_or(0);
                        let max = match s.max_length {
                            Some(m) => m * 4,
                            None if !s.enum_.is_empty() => longest_enum(),
                            None => unbounded_string,
                        };
                        (Kind::Str, 2, max)
                    }
                };
                Some(Decl { kind, max_elements: max, min_size: min })
            }
            "boolean" => Some(Decl::simple(Kind::Bool, 4)),
            "number" => Some(Decl::simple(Kind::Double, 1)),
            "integer" => Some(Decl::simple(Kind::Int, 1)),
            _ => None,
        }
    }

    /// The number of times data of this declaration fits in one request: how often a rule
    /// under unbounded lists or maps can run.
    pub fn max_cardinality(&self) -> u64 {
        MAX_REQUEST_SIZE_BYTES / (self.min_size + 1)
    }

    /// The node a cost path names below this one (`@items`, `@values`, `@keys` or a field).
    fn at(&self, path: &[String]) -> Option<&Decl> {
        let mut node = self;
        for step in path {
            node = match (step.as_str(), &node.kind) {
                ("@items", Kind::List(e)) | ("@values", Kind::Map(e)) => e,
                ("@keys", Kind::Map(_)) => &MAP_KEY,
                (field, Kind::Object(fields)) => fields.get(field)?,
                _ => return None,
            };
        }
        Some(node)
    }
}

static NULL: Value = Value::Null;

static MAP_KEY: Decl = Decl { kind: Kind::Str, max_elements: 0, min_size: 2 };

/// The type a node has, as far as cost goes.
#[derive(Clone, Debug)]
enum Ty<'d> {
    Dyn,
    Bool,
    Int,
    Uint,
    Double,
    Str,
    Bytes,
    Null,
    Duration,
    Timestamp,
    List(Box<Ty<'d>>),
    Map(Box<Ty<'d>>, Box<Ty<'d>>),
    Object(&'d BTreeMap<String, Decl>),
}

impl<'d> Ty<'d> {
    fn of(d: &'d Decl) -> Ty<'d> {
        match &d.kind {
            Kind::Object(f) => Ty::Object(f),
            Kind::List(e) => Ty::List(Box::new(Ty::of(e))),
            Kind::Map(v) => Ty::Map(Box::new(Ty::Str), Box::new(Ty::of(v))),
            Kind::Str => Ty::Str,
            Kind::Bytes => Ty::Bytes,
            Kind::Int => Ty::Int,
            Kind::Double => Ty::Double,
            Kind::Bool => Ty::Bool,
            Kind::Dyn => Ty::Dyn,
            Kind::Duration => Ty::Duration,
            Kind::Timestamp => Ty::Timestamp,
        }
    }

    fn is_scalar(&self) -> bool {
        matches!(self, Ty::Bool | Ty::Double | Ty::Duration | Ty::Int | Ty::Timestamp | Ty::Uint)
    }
}

/// Where sizes of values named by a path (`self`, then fields and `@items`…) come from.
pub enum Sizes<'v> {
    /// The largest the schema allows.
    Declared,
    /// The largest in these values (the rule's `self` and `oldSelf`).
    Actual { new: &'v Value, old: Option<&'v Value> },
}

impl Sizes<'_> {
    fn size(&self, root: &Decl, path: &[String]) -> Option<Est> {
        // The first step is the variable (`self` or `oldSelf`): both are of the root's type.
        let rest = path.get(1..)?;
        let node = root.at(rest)?;
        match self {
            Sizes::Declared => Some(Est { min: 0, max: node.max_elements }),
            Sizes::Actual { new, old } => {
                // Objects and scalars are sized 0, as their declarations are.
                if !matches!(node.kind, Kind::Str | Kind::Bytes | Kind::List(_) | Kind::Map(_) | Kind::Dyn) {
                    return Some(Est::fixed(0));
                }
                let v = if path[0] == "oldSelf" { old.unwrap_or(&NULL) } else { new };
                let mut largest = 0;
                actual_sizes(v, rest, &mut |n| largest = largest.max(n));
                Some(Est { min: 0, max: largest })
            }
        }
    }
}

/// Call `f` with the size of every value `path` reaches in `v`.
fn actual_sizes(v: &Value, path: &[String], f: &mut dyn FnMut(u64)) {
    let Some((step, rest)) = path.split_first() else {
        f(match v {
            Value::String(s) => s.chars().count() as u64,
            Value::Array(a) => a.len() as u64,
            Value::Object(m) => m.len() as u64,
            _ => 1,
        });
        return;
    };
    match (step.as_str(), v) {
        ("@items", Value::Array(a)) => a.iter().for_each(|x| actual_sizes(x, rest, f)),
        ("@values", Value::Object(m)) => m.values().for_each(|x| actual_sizes(x, rest, f)),
        ("@keys", Value::Object(m)) => m.keys().for_each(|k| f(k.chars().count() as u64)),
        (field, Value::Object(m)) => {
            if let Some(x) = m.get(field) {
                actual_sizes(x, rest, f)
            }
        }
        _ => {}
    }
}

/// The cost of `expr`, a rule over `root` (the type of `self` and `oldSelf`), with sizes from
/// `sizes`.
pub fn cost(expr: &IdedExpr, root: &Decl, sizes: &Sizes) -> Est {
    let mut c = Coster { root, sizes, paths: HashMap::new(), types: HashMap::new(), locals: HashMap::new(), computed: HashMap::new(), entries: HashMap::new() };
    c.cost(expr)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Container {
    List,
    Map,
}

/// The sizes of a list's or map's entries, where the expression that made it knows them.
#[derive(Clone, Copy)]
struct Entry {
    container: Container,
    key: Est,
    val: Est,
}

impl Entry {
    fn union(self, o: Entry) -> Entry {
        Entry { container: self.container, key: self.key.union(o.key), val: self.val.union(o.val) }
    }
}

struct Local<'d> {
    path: Vec<String>,
    size: Option<Est>,
    entry: Option<Entry>,
    ty: Ty<'d>,
}

/// The argument of a call, as its cost sees it.
struct Node<'d> {
    size: Option<Est>,
    ty: Ty<'d>,
}

impl Node<'_> {
    fn size(&self) -> Est {
        self.size.unwrap_or(Est::UNKNOWN)
    }
}

/// The overloads whose costs differ; every other function costs 1 plus its arguments.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Overload {
    Other,
    AddString,
    AddList,
    CompareSized,
    InList,
    IndexList,
    IndexMap,
    StartsEnds,
    Matches,
    ContainsString,
    StringToBytes,
    BytesToString,
}

struct Coster<'d, 's> {
    root: &'d Decl,
    sizes: &'s Sizes<'s>,
    paths: HashMap<u64, Vec<String>>,
    types: HashMap<u64, Ty<'d>>,
    locals: HashMap<String, Vec<Local<'d>>>,
    computed: HashMap<u64, Est>,
    entries: HashMap<u64, Entry>,
}

impl<'d> Coster<'d, '_> {
    fn local(&self, name: &str) -> Option<&Local<'d>> {
        self.locals.get(name).and_then(|v| v.last())
    }

    fn path(&self, e: &IdedExpr) -> Vec<String> {
        if let Expr::Ident(name) = &e.expr
            && let Some(l) = self.local(name)
        {
            return l.path.clone();
        }
        self.paths.get(&e.id).cloned().unwrap_or_default()
    }

    fn ty(&self, e: &IdedExpr) -> Ty<'d> {
        self.types.get(&e.id).cloned().unwrap_or(Ty::Dyn)
    }

    fn entry(&self, e: &IdedExpr) -> Option<Entry> {
        if let Some(en) = self.entries.get(&e.id) {
            return Some(*en);
        }
        match &e.expr {
            Expr::Ident(name) => self.local(name).and_then(|l| l.entry),
            _ => None,
        }
    }

    fn size(&mut self, e: &IdedExpr) -> Option<Est> {
        if let Some(s) = self.computed.get(&e.id) {
            return Some(*s);
        }
        let literal = match &e.expr {
            Expr::Literal(LiteralValue::String(s)) => Some(s.inner().chars().count() as u64),
            Expr::Literal(LiteralValue::Bytes(b)) => Some(b.inner().len() as u64),
            Expr::Literal(_) => Some(1),
            Expr::List(l) => Some(l.elements.len() as u64),
            Expr::Map(m) => Some(m.entries.len() as u64),
            _ => None,
        };
        if let Some(n) = literal {
            return Some(Est::fixed(n));
        }
        let path = self.path(e);
        if !path.is_empty()
            && let Some(s) = self.sizes.size(self.root, &path)
        {
            self.computed.insert(e.id, s);
            return Some(s);
        }
        if self.ty(e).is_scalar() {
            return Some(Est::fixed(1));
        }
        if let Expr::Ident(name) = &e.expr
            && let Some(s) = self.local(name).and_then(|l| l.size)
        {
            return Some(s);
        }
        None
    }

    fn size_or_unknown(&mut self, e: &IdedExpr) -> Est {
        self.size(e).unwrap_or(Est::UNKNOWN)
    }

    fn node(&mut self, e: &IdedExpr) -> Node<'d> {
        Node { size: self.size(e), ty: self.ty(e) }
    }

    fn push_local(&mut self, name: &str, local: Local<'d>) {
        self.locals.entry(name.to_string()).or_default().push(local);
    }

    fn pop_local(&mut self, name: &str) {
        if let Some(v) = self.locals.get_mut(name) {
            v.pop();
        }
    }

    fn cost(&mut self, e: &IdedExpr) -> Est {
        let (cost, ty) = match &e.expr {
            Expr::Literal(l) => (
                Est::fixed(0),
                match l {
                    LiteralValue::Boolean(_) => Ty::Bool,
                    LiteralValue::Bytes(_) => Ty::Bytes,
                    LiteralValue::Double(_) => Ty::Double,
                    LiteralValue::Int(_) => Ty::Int,
                    LiteralValue::Null => Ty::Null,
                    LiteralValue::String(_) => Ty::Str,
                    LiteralValue::UInt(_) => Ty::Uint,
                },
            ),
            Expr::Ident(name) => {
                let (path, ty) = match self.local(name) {
                    Some(l) => (l.path.clone(), l.ty.clone()),
                    None if name == "self" || name == "oldSelf" => (vec![name.clone()], Ty::of(self.root)),
                    None => (vec![name.clone()], Ty::Dyn),
                };
                self.paths.insert(e.id, path);
                (Est::fixed(1), ty)
            }
            Expr::Select(sel) => {
                let operand = self.cost(&sel.operand);
                if sel.test {
                    // has() costs nothing beyond its operand (kube-apiserver keeps cel-go's
                    // old presence-test cost).
                    (operand, Ty::Bool)
                } else {
                    let operand_ty = self.ty(&sel.operand);
                    let extra = if matches!(operand_ty, Ty::Map(..) | Ty::Object(_)) { 1 } else { 0 };
                    let ty = match &operand_ty {
                        Ty::Object(fields) => fields.get(&sel.field).map_or(Ty::Dyn, Ty::of),
                        Ty::Map(_, v) => (**v).clone(),
                        _ => Ty::Dyn,
                    };
                    let mut path = self.path(&sel.operand);
                    path.push(sel.field.clone());
                    self.paths.insert(e.id, path);
                    (operand.add(Est::fixed(extra)), ty)
                }
            }
            Expr::Call(_) => return self.call(e),
            Expr::List(list) => {
                let mut sum = Est::fixed(0);
                let mut item = Est { min: if list.elements.is_empty() { 0 } else { u64::MAX }, max: 0 };
                let mut elem_ty = None;
                for x in &list.elements {
                    sum = sum.add(self.cost(x));
                    item = item.union(self.size_or_unknown(x));
                    elem_ty.get_or_insert_with(|| self.ty(x));
                }
                self.entries.insert(e.id, Entry { container: Container::List, key: Est::fixed(1), val: item });
                (sum.add(Est::fixed(LIST_CREATE_COST)), Ty::List(Box::new(elem_ty.unwrap_or(Ty::Dyn))))
            }
            Expr::Map(map) => {
                let mut sum = Est::fixed(0);
                let empty = map.entries.is_empty();
                let mut key = Est { min: if empty { 0 } else { u64::MAX }, max: 0 };
                let mut val = key;
                let mut types = None;
                for entry in &map.entries {
                    if let EntryExpr::MapEntry(m) = &entry.expr {
                        sum = sum.add(self.cost(&m.key)).add(self.cost(&m.value));
                        key = key.union(self.size_or_unknown(&m.key));
                        val = val.union(self.size_or_unknown(&m.value));
                        types.get_or_insert_with(|| (self.ty(&m.key), self.ty(&m.value)));
                    }
                }
                self.entries.insert(e.id, Entry { container: Container::Map, key, val });
                let (k, v) = types.unwrap_or((Ty::Dyn, Ty::Dyn));
                (sum.add(Est::fixed(MAP_CREATE_COST)), Ty::Map(Box::new(k), Box::new(v)))
            }
            Expr::Struct(s) => {
                let mut sum = Est::fixed(STRUCT_CREATE_COST);
                for entry in &s.entries {
                    if let EntryExpr::StructField(f) = &entry.expr {
                        sum = sum.add(self.cost(&f.value));
                    }
                }
                (sum, Ty::Dyn)
            }
            Expr::Comprehension(_) => return self.comprehension(e),
            Expr::Unspecified => (Est::fixed(0), Ty::Dyn),
        };
        self.types.insert(e.id, ty);
        cost
    }

    fn comprehension(&mut self, e: &IdedExpr) -> Est {
        let Expr::Comprehension(comp) = &e.expr else { unreachable!("called on a comprehension") };
        let mut sum = self.cost(&comp.iter_range).add(self.cost(&comp.accu_init));
        let is_bind = matches!(&comp.iter_range.expr, Expr::List(l) if l.elements.is_empty())
            && matches!(&comp.loop_cond.expr, Expr::Literal(LiteralValue::Boolean(b)) if !*b.inner())
            && comp.accu_var != "@result";
        let accu =
            Local { path: self.path(&comp.accu_init), size: self.size(&comp.accu_init), entry: self.entry(&comp.accu_init), ty: self.ty(&comp.accu_init) };
        self.push_local(&comp.accu_var, accu);
        if is_bind {
            sum = sum.add(self.cost(&comp.result));
            self.pop_local(&comp.accu_var);
            if let Some(s) = self.size(&comp.result) {
                self.computed.insert(e.id, s);
            }
            if let Some(en) = self.entry(&comp.result) {
                self.entries.insert(e.id, en);
            }
            let ty = self.ty(&comp.result);
            self.types.insert(e.id, ty);
            return sum;
        }
        let range_ty = self.ty(&comp.iter_range);
        let range_entry = self.entry(&comp.iter_range);
        let container = range_entry.map(|en| en.container).unwrap_or(if matches!(range_ty, Ty::List(_)) { Container::List } else { Container::Map });
        let range_path = self.path(&comp.iter_range);
        let (key_ty, val_ty) = match &range_ty {
            Ty::List(t) => (Ty::Int, (**t).clone()),
            Ty::Map(k, v) => ((**k).clone(), (**v).clone()),
            _ => (Ty::Dyn, Ty::Dyn),
        };
        let with_step = |step: &str| {
            let mut p = range_path.clone();
            p.push(step.to_string());
            p
        };
        let (keys, values) = if container == Container::List { ("@indices", "@items") } else { ("@keys", "@values") };
        match &comp.iter_var2 {
            Some(second) => {
                self.push_local(&comp.iter_var, Local { path: with_step(keys), size: range_entry.map(|en| en.key), entry: None, ty: key_ty });
                self.push_local(second, Local { path: with_step(values), size: range_entry.map(|en| en.val), entry: None, ty: val_ty });
            }
            None => {
                let (path, size, ty) = if container == Container::List {
                    (with_step("@items"), range_entry.map(|en| en.val), val_ty)
                } else {
                    (with_step("@keys"), range_entry.map(|en| en.key), key_ty)
                };
                self.push_local(&comp.iter_var, Local { path, size, entry: None, ty });
            }
        }
        let loop_cost = self.cost(&comp.loop_cond);
        let step_cost = self.cost(&comp.loop_step);
        self.pop_local(&comp.iter_var);
        if let Some(second) = &comp.iter_var2 {
            self.pop_local(second);
        }
        sum = sum.add(self.cost(&comp.result));
        let ty = self.ty(&comp.result);
        self.pop_local(&comp.accu_var);
        let count = self.size_or_unknown(&comp.iter_range);
        sum = sum.add(count.mul(step_cost.add(loop_cost)));
        match &comp.accu_init.expr {
            Expr::Literal(_) => {
                if let Some(s) = self.size(&comp.accu_init) {
                    self.computed.insert(e.id, s);
                }
            }
            Expr::List(_) | Expr::Map(_) => {
                self.computed.insert(e.id, count);
                if let Some(en) = self.entry(&comp.loop_step) {
                    self.entries.insert(e.id, en);
                }
            }
            _ => {}
        }
        self.types.insert(e.id, ty);
        sum
    }

    fn call(&mut self, e: &IdedExpr) -> Est {
        let Expr::Call(call) = &e.expr else { unreachable!("called on a call") };
        if call.func_name == "dyn" && call.target.is_none() && call.args.len() == 1 {
            let arg = &call.args[0];
            let c = self.cost(arg);
            if let Some(s) = self.size(arg) {
                self.computed.insert(e.id, s);
            }
            if let Some(en) = self.entry(arg) {
                self.entries.insert(e.id, en);
            }
            let ty = self.ty(arg);
            self.types.insert(e.id, ty);
            return Est::fixed(1).add(c);
        }
        let mut arg_costs = Vec::with_capacity(call.args.len());
        let mut args = Vec::with_capacity(call.args.len());
        for a in &call.args {
            arg_costs.push(self.cost(a));
            args.push(self.node(a));
        }
        let mut sum = Est::fixed(0);
        let target = match &call.target {
            Some(t) => {
                sum = sum.add(self.cost(t));
                Some(self.node(t))
            }
            None => None,
        };
        let arg_sum = arg_costs.iter().fold(Est::fixed(0), |s, c| s.add(*c));
        let name = call.func_name.as_str();
        let result_ty = result_type(name, &args);
        let mut fn_cost = Est { min: u64::MAX, max: 0 };
        let mut result_size: Option<Est> = None;
        for overload in self.overloads(name, target.as_ref(), &args) {
            let (c, size) = self.function_cost(e, name, overload, target.as_ref(), &call.args, &args, &arg_costs, arg_sum);
            fn_cost = fn_cost.union(c);
            if let Some(s) = size {
                result_size = Some(result_size.map_or(s, |r| r.union(s)));
            }
            if matches!(overload, Overload::IndexList | Overload::IndexMap)
                && let Some(first) = call.args.first()
            {
                result_size = self.entry(first).map(|en| en.val);
                let mut path = self.path(first);
                path.push(if overload == Overload::IndexList { "@items" } else { "@values" }.to_string());
                self.paths.insert(e.id, path);
            }
        }
        self.types.insert(e.id, result_ty);
        if result_size.is_none() {
            result_size = self.size(e);
        }
        if let Some(s) = result_size {
            self.computed.insert(e.id, s);
        }
        sum.add(fn_cost)
    }

    /// The overloads a call may resolve to, given what is known of its operands' types: all
    /// that remain possible when a type is dynamic, as cel-go's checker keeps them.
    fn overloads(&self, name: &str, target: Option<&Node>, args: &[Node]) -> Vec<Overload> {
        use Overload::*;
        let arg = |i: usize| args.get(i).map(|a| &a.ty);
        let string_or = |t: Option<&Ty>, sized: Overload, other: Overload| match t {
            Some(Ty::Str | Ty::Bytes) => vec![sized],
            Some(Ty::Dyn) | None => vec![sized, other],
            _ => vec![other],
        };
        match (name, target.is_some()) {
            (operators::ADD, false) => match arg(0) {
                Some(Ty::Str | Ty::Bytes) => vec![AddString],
                Some(Ty::List(_)) => vec![AddList],
                Some(Ty::Dyn) | None => vec![AddString, AddList, Other],
                _ => vec![Other],
            },
            (operators::EQUALS | operators::NOT_EQUALS, false) => vec![CompareSized],
            (operators::LESS | operators::LESS_EQUALS | operators::GREATER | operators::GREATER_EQUALS, false) => string_or(arg(0), CompareSized, Other),
            (operators::IN, false) => match arg(1) {
                Some(Ty::List(_)) => vec![InList],
                Some(Ty::Map(..)) => vec![Other],
                _ => vec![InList, Other],
            },
            (operators::INDEX, false) => match arg(0) {
                Some(Ty::List(_)) => vec![IndexList],
                Some(Ty::Map(..) | Ty::Object(_)) => vec![IndexMap],
                _ => vec![IndexList, IndexMap],
            },
            ("startsWith" | "endsWith", true) => vec![StartsEnds],
            ("matches", _) => vec![Matches],
            ("contains", true) => vec![ContainsString],
            ("bytes", false) => string_or(arg(0), StringToBytes, Other),
            ("string", false) => match arg(0) {
                Some(Ty::Bytes) => vec![BytesToString],
                Some(Ty::Dyn) | None => vec![BytesToString, Other],
                _ => vec![Other],
            },
            _ => vec![Other],
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn function_cost(
        &mut self,
        e: &IdedExpr,
        name: &str,
        overload: Overload,
        target: Option<&Node>,
        arg_exprs: &[IdedExpr],
        args: &[Node],
        costs: &[Est],
        arg_sum: Est,
    ) -> (Est, Option<Est>) {
        let size = |i: usize| args.get(i).map_or(Est::UNKNOWN, Node::size);
        // The connectives and the conditional first: their costs are not a plain sum.
        match name {
            operators::LOGICAL_AND | operators::LOGICAL_OR if costs.len() >= 2 => {
                let rest = costs[1..].iter().fold(costs[0], |s, c| s.add(*c));
                return (Est { min: costs[0].min, max: rest.max }, None);
            }
            operators::CONDITIONAL if costs.len() == 3 => {
                let result = size(1).union(size(2));
                if let (Some(a), Some(b)) = (self.entry(&arg_exprs[1]), self.entry(&arg_exprs[2])) {
                    self.entries.insert(e.id, a.union(b));
                }
                return (costs[0].add(costs[1].union(costs[2])), Some(result));
            }
            _ => {}
        }
        let traverse = |s: Est| s.factor(STRING_TRAVERSAL_FACTOR);
        match overload {
            Overload::StartsEnds if args.len() == 1 => (traverse(size(0)).add(arg_sum), None),
            Overload::InList if args.len() == 2 => (size(1).add(arg_sum), None),
            Overload::Matches => {
                let (s, re) = match (target, args) {
                    (Some(t), [re]) => (t.size(), re.size()),
                    (None, [s, re]) => (s.size(), re.size()),
                    _ => return (Est::fixed(1).add(arg_sum), None),
                };
                (traverse(s.add(Est::fixed(1))).mul(re.factor(REGEX_LENGTH_FACTOR)).add(arg_sum), None)
            }
            Overload::ContainsString if args.len() == 1 => {
                let t = target.map_or(Est::UNKNOWN, Node::size);
                (traverse(t).mul(traverse(size(0))).add(arg_sum), None)
            }
            Overload::StringToBytes if args.len() == 1 => {
                let s = size(0);
                (traverse(s).add(arg_sum), Some(Est { min: s.min, max: s.max.saturating_mul(4) }))
            }
            Overload::BytesToString if args.len() == 1 => {
                let s = size(0);
                (traverse(s).add(arg_sum), Some(Est { min: s.min / 4, max: s.max }))
            }
            Overload::AddString | Overload::AddList if args.len() == 2 => {
                let result = size(0).add(size(1));
                if let (Some(a), Some(b)) = (self.entry(&arg_exprs[0]), self.entry(&arg_exprs[1])) {
                    self.entries.insert(e.id, a.union(b));
                }
                let c = if overload == Overload::AddList { Est::fixed(1) } else { traverse(result) };
                (c.add(arg_sum), Some(result))
            }
            Overload::CompareSized if args.len() == 2 => {
                let smallest = size(0).max.min(size(1).max);
                (traverse(Est { min: u64::from(smallest > 0), max: smallest }).add(arg_sum), None)
            }
            _ => (Est::fixed(1).add(arg_sum), None),
        }
    }
}

/// The type a call returns, as far as cost goes.
fn result_type<'d>(name: &str, args: &[Node<'d>]) -> Ty<'d> {
    let first = || args.first().map_or(Ty::Dyn, |a| a.ty.clone());
    match name {
        operators::LOGICAL_AND
        | operators::LOGICAL_OR
        | operators::LOGICAL_NOT
        | operators::EQUALS
        | operators::NOT_EQUALS
        | operators::LESS
        | operators::LESS_EQUALS
        | operators::GREATER
        | operators::GREATER_EQUALS
        | operators::IN
        | operators::NOT_STRICTLY_FALSE => Ty::Bool,
        "startsWith" | "endsWith" | "matches" | "contains" | "isURL" => Ty::Bool,
        "size" | "int" => Ty::Int,
        "uint" => Ty::Uint,
        "double" => Ty::Double,
        "string" => Ty::Str,
        "bytes" => Ty::Bytes,
        operators::ADD | operators::SUBSTRACT | operators::MULTIPLY | operators::DIVIDE | operators::MODULO | operators::NEGATE => first(),
        operators::CONDITIONAL => args.get(1).map_or(Ty::Dyn, |a| a.ty.clone()),
        operators::INDEX => match args.first().map(|a| &a.ty) {
            Some(Ty::List(t)) => (**t).clone(),
            Some(Ty::Map(_, v)) => (**v).clone(),
            _ => Ty::Dyn,
        },
        _ => Ty::Dyn,
    }
}

/// kube-apiserver's wording of how far a cost exceeds its limit.
pub fn exceeds_message(what: &str, cost: u64, limit: u64) -> String {
    let factor = cost as f64 / limit as f64;
    let factor = if factor > 100.0 {
        "more than 100x".to_string()
    } else if factor < 1.5 {
        format!("{factor:.6}x")
    } else {
        format!("{factor:.1}x")
    };
    format!(
        "{what} exceeds budget by factor of {factor} (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn decl(v: Value) -> Decl {
        let s = Schema::parse(&v, "", &mut Vec::new());
        Decl::of(&s, false).expect("a typed schema")
    }

    fn estimate(rule: &str, schema: Value) -> Est {
        let program = cel::Program::compile(rule).expect("a rule that parses");
        cost(program.expression(), &decl(schema), &Sizes::Declared)
    }

    #[test]
    fn constants_cost_nothing_and_every_identifier_and_selection_one() {
        let schema = json!({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}});
        assert_eq!(estimate("true", schema.clone()), Est::fixed(0));
        // self (1) + .a (1), self (1) + .b (1), and `<` on ints (1).
        assert_eq!(estimate("self.a < self.b", schema), Est::fixed(5));
    }

    #[test]
    fn a_comprehension_costs_its_body_times_its_range() {
        let schema = json!({"type": "object", "properties": {"l": {"type": "array", "maxItems": 10, "items": {"type": "integer"}}}});
        // The range self.l (2) and the result @result (1); per item the condition
        // @not_strictly_false(@result) (2) and the step @result && x > 0 (1, and 2 for the
        // comparison: `&&` itself is free).
        let e = estimate("self.l.all(x, x > 0)", schema);
        assert_eq!(e.max, 2 + 1 + 10 * (2 + 3));
    }

    #[test]
    fn unbounded_lists_are_sized_by_the_request_limit_and_nesting_multiplies() {
        let bounded = json!({"type": "object", "properties": {"l": {"type": "array", "maxItems": 100, "items": {"type": "string", "maxLength": 10}}}});
        let unbounded = json!({"type": "object", "properties": {"l": {"type": "array", "items": {"type": "string"}}}});
        let rule = "self.l.all(x, self.l.all(y, x == y))";
        assert!(estimate(rule, bounded).max < ESTIMATED_COST_LIMIT);
        assert!(estimate(rule, unbounded).max > 100 * ESTIMATED_COST_LIMIT);
    }

    #[test]
    fn actual_sizes_cost_what_the_object_holds() {
        let d = decl(json!({"type": "object", "properties": {"l": {"type": "array", "items": {"type": "string"}}}}));
        let program = cel::Program::compile("self.l.all(x, x.startsWith('a'))").expect("parses");
        let small = json!({"l": ["a", "b"]});
        let large = json!({"l": vec!["abc"; 1000]});
        let cost_of = |v: &Value| cost(program.expression(), &d, &Sizes::Actual { new: v, old: None }).max;
        assert!(cost_of(&small) < cost_of(&large));
        assert!(cost_of(&large) < cost(program.expression(), &d, &Sizes::Declared).max);
    }

    #[test]
    fn the_factor_is_worded_as_kube_apiserver_words_it() {
        assert!(exceeds_message("estimated rule cost", 181_000_000, 10_000_000).contains("by factor of 18.1x"));
        assert!(exceeds_message("estimated rule cost", 12_000_000, 10_000_000).contains("by factor of 1.200000x"));
        assert!(exceeds_message("estimated rule cost", u64::MAX, 10_000_000).contains("by factor of more than 100x"));
    }
}
