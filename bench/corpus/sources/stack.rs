fn longest(words: &Vec<String>) -> &String {
    let mut best = &words[0];
    for w in words {
        if w.len() > best.len() {
            best = w;
        }
    }
    best
}

fn main() {
    let mut words = vec![String::from("alpha"), String::from("be")];
    let first = &words[0];
    words.push(String::from("gamma"));
    let n: i32 = words.len();
    println!("{} {} {}", first, longest(&words), n);
}
